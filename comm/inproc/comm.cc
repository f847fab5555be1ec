#include "comm/inproc/comm.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/fault.h"
#include "comm/registry.h"
#include "core/status.h"

namespace weft {
namespace inproc {
namespace {

// How long a waiting rank polls, yielding its core, before it sleeps.
constexpr auto kPollFor = std::chrono::microseconds(100);

}  // namespace

// The ranks are threads of one process, often more of them (a collective's
// callers and their streams' threads) than cores. A rank that arrives early
// first polls the generation for a short while, yielding its core each time
// (most likely to the rank it waits for), and only then sleeps: each sleep
// costs the last arriver a futex wake and the sleeper a context switch,
// which dominated small calls on 2 vCPUs (an all-reduce is 2 barriers).
absl::Status World::Arrive(int rank, int timeout_ms, bool compare) {
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return Aborted("in-process world was aborted");
    if (broken_by_ >= 0) return RemoteError("rank %d timed out in an earlier collective", broken_by_);
    gen = generation_.load(std::memory_order_relaxed);
    if (++arrived_ == size_) {
      arrived_ = 0;
      if (compare) {
        disagree_ = -1;
        least_d_ = slots_[0].d;
        for (int r = 1; r < size_; ++r) {
          const Slot& s = slots_[r];
          if (disagree_ < 0 && (s.a != slots_[0].a || s.b != slots_[0].b || s.c != slots_[0].c)) disagree_ = r;
          least_d_ = std::min(least_d_, s.d);
        }
      }
      generation_.store(gen + 1, std::memory_order_release);
      cv_.notify_all();
      return absl::OkStatus();
    }
  }
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < kPollFor) {
    if (generation_.load(std::memory_order_acquire) != gen) return absl::OkStatus();
    if (aborted_.load(std::memory_order_relaxed)) break;
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mu_);
  const bool done = cv_.wait_until(lock, start + std::chrono::milliseconds(timeout_ms), [&] {
    return generation_.load(std::memory_order_relaxed) != gen || aborted_ || broken_by_ >= 0;
  });
  if (generation_.load(std::memory_order_relaxed) != gen) return absl::OkStatus();
  if (aborted_) return Aborted("in-process world was aborted");
  if (!done) {
    broken_by_ = rank;
    cv_.notify_all();
    return Timeout("rank %d waited %d ms for %d of %d ranks to arrive", rank, timeout_ms, size_ - arrived_, size_);
  }
  return RemoteError("rank %d timed out; this collective cannot complete", broken_by_);
}

uint64_t World::Claim(uint64_t end) {
  uint64_t t = next_ticket_.load(std::memory_order_relaxed);
  while (t < end && !next_ticket_.compare_exchange_weak(t, t + 1, std::memory_order_relaxed)) {
  }
  return std::min(t, end);
}

void World::Finish(uint64_t end) {
  if (done_tickets_.fetch_add(1, std::memory_order_acq_rel) + 1 != end) return;
  std::lock_guard<std::mutex> lock(mu_);  // a waiter checks under mu_, so it cannot miss this
  cv_.notify_all();
}

// Polls, then sleeps, as Arrive does. No timeout: every claimed chunk is
// finite work by a thread that does not block.
void World::WaitDone(uint64_t end) {
  const auto done = [&] { return done_tickets_.load(std::memory_order_acquire) >= end; };
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < kPollFor) {
    if (done()) return;
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, done);
}

void World::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
  }
  cv_.notify_all();
}

std::shared_ptr<World> World::SplitWorld(uint64_t seq, int color, int size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& w = splits_[{seq, color}];
  if (!w) w = std::make_shared<World>(size);
  return w;
}

void World::ForgetSplit(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = splits_.begin(); it != splits_.end();) {
    it = it->first.first == seq ? splits_.erase(it) : std::next(it);
  }
}

InProcComm::InProcComm(std::shared_ptr<World> world, int rank, const CommOptions& options)
    : Communicator(rank, world->size(), options), DirectReduce(this), world_(std::move(world)), src_(size()), dst_(size()) {}

absl::StatusOr<std::unique_ptr<Communicator>> InProcComm::DoSplit(int color, int key) {
  RETURN_IF_ERROR(PublishSplit(color, key));
  const uint64_t seq = splits_++;  // counted once every rank is known to be in this split
  // Members of my color, ordered by (key, old rank).
  std::vector<std::pair<int64_t, int>> members;
  for (int r = 0; r < size(); ++r) {
    const uint64_t d = world_->slot(r).d;
    const int c = static_cast<int>(static_cast<uint32_t>(d >> 32)), k = static_cast<int>(static_cast<uint32_t>(d));
    if (color >= 0 && c == color) members.emplace_back(k, r);
  }
  std::sort(members.begin(), members.end());
  std::unique_ptr<Communicator> out;
  if (color >= 0) {
    const int new_rank = static_cast<int>(
        std::find_if(members.begin(), members.end(), [&](auto& m) { return m.second == rank(); }) -
        members.begin());
    out = std::make_unique<InProcComm>(world_->SplitWorld(seq, color, static_cast<int>(members.size())), new_rank,
                                       options());
  }
  // Everyone has read the slots and fetched its world before they are reused.
  RETURN_IF_ERROR(Arrive());
  if (rank() == 0) world_->ForgetSplit(seq);
  return out;
}

namespace {

// InitInProcess without WEFT_FAULT's checks, which a one-rank world made
// through InitWorld has already had.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeInProcess(int n, const CommOptions& in) {
  if (n < 1) return InvalidArgument("nranks = %d must be at least 1", n);
  if (in.memory != MemKind::kHost) {
    return InvalidArgument("config.memory = %s: the in-process backend works on host memory", Name(in.memory));
  }
  const CommOptions options = ResolveOptions(in);
  auto world = std::make_shared<World>(n);
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.reserve(n);
  for (int r = 0; r < n; ++r) comms.push_back(std::make_unique<InProcComm>(world, r, options));
  return comms;
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitInProcess(int n, const CommOptions& in) {
  RETURN_IF_ERROR(fault::CheckEnv());
  return fault::AtInit(MakeInProcess(n, in));
}

namespace {

// A process's own world: one rank (several ranks of one process come from
// InitInProcess instead).
absl::StatusOr<std::unique_ptr<Communicator>> InitWorldOneRank(bootstrap::Bootstrap& b, const CommOptions& options) {
  if (b.size() != 1) {
    return InvalidArgument("the in-process backend makes a one-rank world per process, not one of %d ranks",
                           b.size());
  }
  ASSIGN_OR_RETURN(auto comms, MakeInProcess(1, options));
  return std::move(comms[0]);
}

[[maybe_unused]] const bool kRegistered =
    RegisterBackend({Backend::kInProcess, MemKind::kHost, nullptr, &InitWorldOneRank, &InitInProcess});

}  // namespace
}  // namespace inproc
}  // namespace weft
