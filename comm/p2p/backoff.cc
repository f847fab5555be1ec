#include "comm/p2p/backoff.h"

#include <sched.h>

#include <thread>

#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

// Polls before the first yield even when ranks share cores: a reply often
// comes within a few microseconds, and yielding costs about as much.
constexpr int kSpins = 64;
// After this long without progress the peer is busy elsewhere (computing,
// or late); sleeping frees the core instead of spinning on sched_yield.
constexpr auto kYieldPhase = std::chrono::milliseconds(5);
constexpr auto kSleep = std::chrono::microseconds(50);

}  // namespace

Backoff::Backoff(const Patience& p) : p_(p), last_progress_(std::chrono::steady_clock::now()) {}

void Backoff::Progress() {
  idle_ = 0;
  last_progress_ = std::chrono::steady_clock::now();
}

absl::Status Backoff::Idle() {
  if (p_.owner != nullptr && p_.owner->aborted()) {
    return Aborted("rank %d: the communicator was aborted while waiting", p_.rank);
  }
  if (++idle_ <= kSpins) return absl::OkStatus();
  const auto waited = std::chrono::steady_clock::now() - last_progress_;
  if (waited < p_.spin) return absl::OkStatus();
  if (waited >= std::chrono::milliseconds(p_.timeout_ms)) {
    return Timeout("rank %d waited %d ms without progress", p_.rank, p_.timeout_ms);
  }
  if (waited < kYieldPhase) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(kSleep);
  }
  return absl::OkStatus();
}

}  // namespace p2p
}  // namespace weft
