// The bootstrap root: the thread behind a unique id, which every rank of
// one world connects to. It checks each hello (the job tag, nranks, the
// rank), serves the ranks' all-gathers (every block in, every rank's blocks
// out), and ends once every rank has said goodbye, or as soon as the world
// cannot form: then every connected rank gets the reason (missing ranks at
// the timeout, a duplicate or out-of-range rank, nranks that differ, a rank
// that left or died). A connection that does not present the job tag is
// dropped; nothing read from the wire is trusted before it is checked.
// It stops listening once every rank has joined.
//
//   ASSIGN_OR_RETURN(Fd listener, Listen(here, false));
//   RETURN_IF_ERROR(StartRoot(std::move(listener), here, tag));
//   ...  // ranks join (socket.h)
//   FinishRoot(tag, /*wait=*/true);
#ifndef WEFT_COMM_BOOTSTRAP_ROOT_H_
#define WEFT_COMM_BOOTSTRAP_ROOT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "comm/bootstrap/net.h"

namespace weft {
namespace bootstrap {

// Serves one world on `listener` (bound, listening) on a thread of its own.
// `advertised` names it in messages. With no rank joining within
// `idle_timeout_ms` it ends by itself; once one has, within the timeout that
// rank's hello carries.
absl::Status StartRoot(Fd listener, const Endpoint& advertised, uint64_t tag, int idle_timeout_ms);

// Called by a rank that leaves the bootstrap: when this process runs the
// root of `tag`, `wait` joins its thread (it ends promptly after a failure);
// otherwise the finished thread is reaped by the next StartRoot.
void FinishRoot(uint64_t tag, bool wait);

// Roots of this process still running (tests check that none is left).
int RunningRoots();

}  // namespace bootstrap
}  // namespace weft

#endif  // WEFT_COMM_BOOTSTRAP_ROOT_H_
