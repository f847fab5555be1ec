// The MPI backend's engine: runs a point-to-point Schedule
// (comm/p2p/schedule.h) with MPI_Isend/MPI_Irecv, driven by one polling loop
// that yields when idle and never waits forever.
//
//   p2p::RingSchedule ring(...);                 // p2p/collectives.cc
//   RETURN_IF_ERROR(RunPipeline(ring, 4, wait));
//
// Transfers between two ranks with one tag are matched by MPI's
// non-overtaking rule. A transfer whose tag carries p2p::kUserTagBit is a
// user's point-to-point message: it travels on the communicator's duplicate
// (WaitSpec::users) under the user's tag, so it never meets a collective's.
// The loop polls MPI_Testsome with p2p::Backoff (spin, then sched_yield,
// then short sleeps), so several ranks sharing a core still make progress.
// It returns Timeout after `timeout_ms` without any progress and Aborted as
// soon as the owning communicator is aborted, cancelling its receives first.
#ifndef WEFT_COMM_MPI_PIPELINE_H_
#define WEFT_COMM_MPI_PIPELINE_H_

#include <mpi.h>

#include <chrono>
#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/p2p/backoff.h"
#include "comm/p2p/outbox.h"
#include "comm/p2p/schedule.h"

namespace weft {
namespace mpi {

// The shared schedules' types (comm/p2p/schedule.h) under their old names.
using p2p::Schedule;
using p2p::Transfer;
using p2p::Backoff;

// Who waits, and for how long: p2p::Patience plus the MPI communicator.
struct WaitSpec {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int timeout_ms = 0;
  const Communicator* owner = nullptr;  // checked for aborted(); may be null
  std::chrono::microseconds spin{0};    // p2p::Patience::spin
  const p2p::HangWatch* watch = nullptr;  // p2p::Patience::watch
  WaitPolicy policy = WaitPolicy::kYield;  // p2p::Patience::policy
  MPI_Comm users = MPI_COMM_NULL;  // comm's duplicate, for the users' point-to-point messages
  operator p2p::Patience() const { return {rank, timeout_ms, owner, spin, watch, policy}; }  // NOLINT: a Backoff from a WaitSpec
};

// Polls requests with backoff, timeout and abort checks.
class Poller {
 public:
  explicit Poller(const WaitSpec& w) : backoff_(w) {}
  // Tests reqs[0..n): the number completed (their indices in `done`, and
  // reqs set to MPI_REQUEST_NULL), after backing off while none is. With
  // `statuses`, theirs go there, and a completion in error (a truncated
  // receive, a peer that failed) is an error naming it.
  absl::StatusOr<int> Some(int n, MPI_Request* reqs, int* done, MPI_Status* statuses = MPI_STATUSES_IGNORE);

 private:
  Backoff backoff_;
};

// Waits for every request of reqs[0..n); `what` names them in a timeout.
absl::Status WaitAll(int n, MPI_Request* reqs, const WaitSpec& w, const char* what);

// Runs `s` to completion with up to `window` lanes in flight.
absl::Status RunPipeline(Schedule& s, int window, const WaitSpec& w);

// Eager sends (p2p/outbox.h) as MPI_Isend on `users` (the communicator's
// duplicate) under the user's tag, tested with MPI_Test.
p2p::Outbox::Wire SendWire(MPI_Comm users);

// An MPI call's return code as a status ("MPI_Isend to rank 3: ...").
absl::Status CheckMpi(int rc, const char* call, int peer = -1);

}  // namespace mpi
}  // namespace weft

#endif  // WEFT_COMM_MPI_PIPELINE_H_
