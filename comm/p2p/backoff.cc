#include "comm/p2p/backoff.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

// Polls before the first yield even when ranks share cores: a reply often
// comes within a few microseconds, and yielding costs about as much.
constexpr int kSpins = 64;
// kYield: after this long without progress the peer is busy elsewhere
// (computing, or late); sleeping frees the core instead of spinning on
// sched_yield.
constexpr auto kYieldPhase = std::chrono::milliseconds(5);
constexpr auto kSleep = std::chrono::microseconds(50);
// kBlock: at most this long polling before sleeping. A peer that is coming
// (a collective's ranks arriving together) usually does within it; one that
// is not is computing, and the core is worth more to that computation.
constexpr auto kBlockSpin = std::chrono::microseconds(50);
// Naps (no wake-up possible) grow from the first to the longest: short while
// the peer may be close, and bounded so a late peer costs at most this much.
constexpr auto kFirstNap = std::chrono::microseconds(10);
constexpr auto kLongestNap = std::chrono::microseconds(500);
// A sleep that a peer can end is bounded too, so that timeouts and aborts
// are still seen.
constexpr auto kLongestSleep = std::chrono::milliseconds(2);

// How often a waiting rank asks whether its peers' processes still exist: a
// dead peer is reported within this, and the probes (a kill(pid, 0) per peer
// on one node, a connection per peer otherwise) cost nothing next to a wait
// this long.
constexpr auto kProbeEvery = std::chrono::milliseconds(250);

long long Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

Backoff::Backoff(const Patience& p)
    : p_(p), nap_(kFirstNap), last_progress_(std::chrono::steady_clock::now()),
      warn_ms_(p.watch != nullptr ? HangWarnMs(p.timeout_ms) : 0), next_probe_(kProbeEvery) {
  if (p_.policy == WaitPolicy::kDefault) p_.policy = WaitPolicy::kYield;
}

void Backoff::Progress() {
  idle_ = 0;
  nap_ = kFirstNap;
  last_progress_ = std::chrono::steady_clock::now();
  next_probe_ = kProbeEvery;
  warned_ = false;
}

absl::Status Backoff::Idle() { return Wait(nullptr); }

absl::Status Backoff::Idle(Sleep sleep) { return Wait(&sleep); }

absl::Status Backoff::Wait(const Sleep* sleep) {
  ++counts_.polls;
  if (p_.owner != nullptr && p_.owner->aborted()) {
    return Aborted("rank %d: the communicator was aborted while waiting", p_.rank);
  }
  if (++idle_ <= kSpins) return absl::OkStatus();
  const auto waited = std::chrono::steady_clock::now() - last_progress_;
  if (p_.watch != nullptr && waited >= next_probe_) {
    next_probe_ = waited + kProbeEvery;
    RETURN_IF_ERROR(p_.watch->ProbeDead(Ms(waited)));
  }
  if (waited >= std::chrono::milliseconds(p_.timeout_ms)) {
    if (p_.watch != nullptr) return Timeout("timed out after %d ms: %s", p_.timeout_ms, p_.watch->Report(Ms(waited)));
    return Timeout("rank %d waited %d ms without progress", p_.rank, p_.timeout_ms);
  }
  if (warn_ms_ > 0 && !warned_ && waited >= std::chrono::milliseconds(warn_ms_)) {
    warned_ = true;  // once per stall: the report is long, and the state it shows changes slowly
    Log(LogLevel::kWarn, "hang report (WEFT_HANG_WARN_MS=%d; the timeout is %d ms): %s", warn_ms_, p_.timeout_ms,
        p_.watch->Report(Ms(waited)));
  }
  switch (p_.policy) {
    case WaitPolicy::kSpin:
      return absl::OkStatus();
    case WaitPolicy::kBlock:
      if (waited < std::min<std::chrono::microseconds>(p_.spin, kBlockSpin)) return absl::OkStatus();
      if (sleep != nullptr) {
        ++counts_.sleeps;
        (*sleep)(kLongestSleep);
      } else {
        ++counts_.naps;
        std::this_thread::sleep_for(nap_);
        nap_ = std::min<std::chrono::microseconds>(nap_ * 2, kLongestNap);
      }
      return absl::OkStatus();
    default:  // kYield
      if (waited < p_.spin) return absl::OkStatus();
      if (waited < kYieldPhase) {
        ++counts_.yields;
        sched_yield();
      } else {
        ++counts_.naps;
        std::this_thread::sleep_for(kSleep);
      }
      return absl::OkStatus();
  }
}

}  // namespace p2p
}  // namespace weft
