// The hang watch's side channel between processes that do not share a node
// (hang.h): each process runs one small TCP listener, started with its first
// point-to-point communicator that has no shared-memory rounds, and answers
// "what is rank r of communicator k doing?" with that rank's progress words.
// No collective traffic goes over it, so it answers while the data path is
// stuck, and a peer whose listener refuses the connection has exited (its
// kernel closed the socket): that is how a dead rank over TCP is told from a
// slow one, and named with its node.
//
// A request is 16 bytes (magic, rank, communicator key), the answer 72
// (magic, found, the 64 bytes of ProgressWords), in the byte order of the
// job's processes, which share an architecture as their data does.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Board> board, MakeTcpBoard(rank, size, &words, all_gather));
//   watch.SetBoard(std::move(board));
#ifndef WEFT_COMM_P2P_STATUS_CHANNEL_H_
#define WEFT_COMM_P2P_STATUS_CHANNEL_H_

#include <cstddef>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "comm/p2p/hang.h"

namespace weft {
namespace p2p {

// Every rank's `bytes` at `mine` into `all` (size * bytes), in rank order.
using AllGatherFn = absl::FunctionRef<absl::Status(const void* mine, void* all, size_t bytes)>;

// Collective: registers `mine` (which must outlive the board) with this
// process's listener and learns every peer's address, pid and node through
// `all_gather`. A process that cannot listen still joins (its peers then
// report it as unknown, not dead); only a failed all-gather is an error.
absl::StatusOr<std::unique_ptr<Board>> MakeTcpBoard(int rank, int size, const ProgressWords* mine,
                                                     AllGatherFn all_gather);

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_STATUS_CHANNEL_H_
