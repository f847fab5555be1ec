// The MPI backend's engine: point-to-point transfers driven by one polling
// loop that yields when idle and never waits forever.
//
// A collective is written as a Schedule: `lanes` independent walks of
// `steps` steps each. At every step a lane posts at most one send and one
// receive (a Transfer); when both are done the schedule's Complete hook runs
// (reduce what arrived, say) and the lane moves to its next step. Up to
// `window` lanes are in flight at once, which is what pipelines a large
// message: in the ring all-reduce a lane is one segment of every rank's
// chunk, so one segment is being reduced while the next is on the wire, and
// the data a step touches stays in cache.
//
//   RingSchedule ring(...);                      // collectives.cc
//   RETURN_IF_ERROR(RunPipeline(ring, 4, wait));
//
// Lane `l` runs in slot `l % window` and starts when lane `l - window` has
// finished. A schedule may tag its transfers with the slot: messages between
// two ranks with one tag are then posted in the same order on both sides,
// which is all MPI's non-overtaking rule needs to match them.
//
// The loop polls MPI_Testsome: spins (WaitSpec::spin), then sched_yield, then
// short sleeps, so several ranks sharing a core still make progress. It returns
// Timeout after `timeout_ms` without any progress and Aborted as soon as the
// owning communicator is aborted, cancelling its receives first.
#ifndef WEFT_COMM_MPI_PIPELINE_H_
#define WEFT_COMM_MPI_PIPELINE_H_

#include <mpi.h>

#include <chrono>
#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace weft {
namespace mpi {

// One lane's traffic at one step. `to` / `from` < 0: no send / no receive.
struct Transfer {
  const void* send = nullptr;
  size_t send_bytes = 0;
  int to = -1;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  int from = -1;
  int tag = 0;
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual size_t lanes() const = 0;
  virtual int steps() const = 0;
  // The transfers of `lane` at `step`; `slot` (lane % window) picks scratch.
  // May compute (e.g. widen the data it is about to send).
  virtual Transfer Post(size_t lane, int slot, int step) = 0;
  // Both transfers of (lane, step) have completed.
  virtual void Complete(size_t lane, int slot, int step) = 0;
};

// Who waits, and for how long.
struct WaitSpec {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int timeout_ms = 0;
  const Communicator* owner = nullptr;  // checked for aborted(); may be null
  // How long to poll without yielding. When every local rank has a core of
  // its own, yielding only adds latency (and on a loaded machine hands the
  // core to someone else for a whole time slice); when ranks share cores,
  // the peer we wait for may need ours, so spin only briefly.
  std::chrono::microseconds spin{0};
};

// How a polling loop waits: spin, then sched_yield, then short sleeps, with
// timeout and abort checks. Call Idle() after each poll that found nothing
// and Progress() after each that found something.
class Backoff {
 public:
  explicit Backoff(const WaitSpec& w);
  absl::Status Idle();
  void Progress();

 private:
  WaitSpec w_;
  int idle_ = 0;
  std::chrono::steady_clock::time_point last_progress_;
};

// Polls requests with backoff, timeout and abort checks.
class Poller {
 public:
  explicit Poller(const WaitSpec& w) : backoff_(w) {}
  // Tests reqs[0..n): the number completed (their indices in `done`, and
  // reqs set to MPI_REQUEST_NULL), after backing off while none is.
  absl::StatusOr<int> Some(int n, MPI_Request* reqs, int* done);

 private:
  Backoff backoff_;
};

// Waits for every request of reqs[0..n); `what` names them in a timeout.
absl::Status WaitAll(int n, MPI_Request* reqs, const WaitSpec& w, const char* what);

// Runs `s` to completion with up to `window` lanes in flight.
absl::Status RunPipeline(Schedule& s, int window, const WaitSpec& w);

// An MPI call's return code as a status ("MPI_Isend to rank 3: ...").
absl::Status CheckMpi(int rc, const char* call, int peer = -1);

}  // namespace mpi
}  // namespace weft

#endif  // WEFT_COMM_MPI_PIPELINE_H_
