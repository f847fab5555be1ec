// Cross-memory attach: reading another process's memory with
// process_vm_readv (Linux 3.2+), the single-copy path of the shared-memory
// collectives (shm_cma.cc), as Open MPI's vader and UCX's cma transport use
// it. The kernel copies straight from the peer's pages into ours: one copy
// where staging through a shared segment makes two, and no round-by-round
// hand-off between the two processes.
//
// Whether a process may read another's memory is the kernel's ptrace access
// check (same user, Yama's ptrace_scope, seccomp profiles of containers, pid
// namespaces), so it is probed, never assumed: every rank reads a nonce out
// of every peer's memory at the address that peer published, and compares
// it with the value the peer published beside it (a stale pid in another
// namespace cannot pass).
//
//   RETURN_IF_ERROR(CmaRead(pid, peer_buffer + offset, scratch, bytes));
#ifndef WEFT_COMM_P2P_CMA_H_
#define WEFT_COMM_P2P_CMA_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace weft {
namespace p2p {

// Copies `bytes` at `remote` in process `pid` to `local`, looping over the
// kernel's partial reads. SystemError naming the process and the address
// when it cannot (EPERM: not permitted; ESRCH: the process is gone; EFAULT:
// the range is not mapped there).
absl::Status CmaRead(pid_t pid, const void* remote, void* local, size_t bytes);

// This process's probe: a word holding a random value (never 0), drawn once.
// A peer that reads it at this address through CmaRead and finds the value
// published beside the address may read this process's memory.
const uint64_t* CmaProbeWord();

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_CMA_H_
