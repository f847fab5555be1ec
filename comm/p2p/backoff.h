// How a point-to-point engine's polling loop waits: spin, then sched_yield,
// then short sleeps, with timeout and abort checks. Ranks that share cores
// (more ranks than cores, common on test machines and in oversubscribed
// jobs) still make progress: the peer we poll for may need our core.
//
//   Backoff backoff({rank, timeout_ms, this, spin});
//   while (!Poll()) RETURN_IF_ERROR(backoff.Idle());
//   backoff.Progress();
#ifndef WEFT_COMM_P2P_BACKOFF_H_
#define WEFT_COMM_P2P_BACKOFF_H_

#include <chrono>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/p2p/hang.h"

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
};

// Call Idle() after each poll that found nothing and Progress() after each
// that found something. Idle() fails with Timeout after `timeout_ms`
// without progress, with Aborted once the owner is aborted, and with
// RemoteError as soon as the watch finds a peer dead (probed every
// kProbeEvery of waiting, past the first).
class Backoff {
 public:
  explicit Backoff(const Patience& p);
  absl::Status Idle();
  void Progress();

 private:
  Patience p_;
  int idle_ = 0;
  std::chrono::steady_clock::time_point last_progress_;
  const int warn_ms_;
  bool warned_ = false;
  std::chrono::steady_clock::duration next_probe_;
};

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_BACKOFF_H_
