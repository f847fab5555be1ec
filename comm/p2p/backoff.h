// How a point-to-point engine's polling loop waits, by the communicator's
// wait policy (core/env.h: WaitPolicy), with timeout and abort checks under
// every policy. Ranks that share cores (more ranks than cores, common on test
// machines and in oversubscribed jobs) still make progress: the peer we poll
// for may need our core; and with kBlock a training job's compute threads
// get the cores a waiting rank would otherwise spin on.
//
//   Backoff backoff({rank, timeout_ms, this, spin, policy});
//   while (!Poll()) RETURN_IF_ERROR(backoff.Idle());
//   backoff.Progress();
//
// An engine that a peer can wake (a futex in shared memory) passes how to
// sleep until woken: Idle(sleep) calls sleep(d) to block at most d.
#ifndef WEFT_COMM_P2P_BACKOFF_H_
#define WEFT_COMM_P2P_BACKOFF_H_

#include <chrono>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/p2p/hang.h"
#include "core/env.h"

namespace weft {
namespace p2p {

// Who waits, and for how long.
struct Patience {
  int rank = 0;
  int timeout_ms = 0;
  const Communicator* owner = nullptr;  // checked for aborted(); may be null
  // How long to poll without yielding. When every local rank has a core of
  // its own, yielding only adds latency (and on a loaded machine hands the
  // core to someone else for a whole time slice); when ranks share cores,
  // the peer we wait for may need ours, so spin only briefly.
  std::chrono::microseconds spin{0};
  // The communicator's hang watch (hang.h): a wait past WEFT_HANG_WARN_MS
  // logs its report, a timeout's error is its report, and a peer found dead
  // ends the wait at once. May be null (waits during set-up).
  const HangWatch* watch = nullptr;
  // kDefault is taken as kYield (the engines' behaviour before policies).
  WaitPolicy policy = WaitPolicy::kYield;
};

// How a Backoff has waited so far: what a test of the policy observes.
struct WaitCounts {
  uint64_t polls = 0;   // Idle() calls
  uint64_t yields = 0;  // sched_yield calls
  uint64_t naps = 0;    // timed sleeps nobody can cut short
  uint64_t sleeps = 0;  // sleeps a peer can end (the engine's sleep)
};

// Call Idle() after each poll that found nothing and Progress() after each
// that found something. Idle() fails with Timeout after `timeout_ms`
// without progress, with Aborted once the owner is aborted, and with
// RemoteError as soon as the watch finds a peer dead (probed every
// kProbeEvery of waiting, past the first).
class Backoff {
 public:
  using Sleep = absl::FunctionRef<void(std::chrono::microseconds)>;

  explicit Backoff(const Patience& p);
  absl::Status Idle();
  absl::Status Idle(Sleep sleep);
  void Progress();
  const WaitCounts& counts() const { return counts_; }

 private:
  absl::Status Wait(const Sleep* sleep);

  Patience p_;
  int idle_ = 0;
  std::chrono::microseconds nap_;
  std::chrono::steady_clock::time_point last_progress_;
  const int warn_ms_;
  bool warned_ = false;
  std::chrono::steady_clock::duration next_probe_;
  WaitCounts counts_;
};

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_BACKOFF_H_
