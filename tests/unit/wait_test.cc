// The wait policies (core/env.h: WaitPolicy) as the host engines' Backoff
// applies them: spin never gives up the core, yield yields before it naps,
// block sleeps (woken by the peer where the engine can be, else in naps),
// and every policy still times out. Then the futex under the shared-memory
// barrier, and that barrier under kBlock with a late peer: the waiter sleeps
// instead of burning the core.
#include <time.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/p2p/backoff.h"
#include "comm/p2p/futex.h"
#include "comm/p2p/shm.h"

namespace weft {
namespace p2p {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Waited {
  WaitCounts counts;
  int hook_calls = 0;
  microseconds longest_hook{0};
  double cpu_ms = 0;
};

// Waits with `policy` until another thread sets a flag after `delay`; with
// `wakeable`, Idle gets a sleep hook (which here just sleeps its limit).
Waited WaitFor(WaitPolicy policy, milliseconds delay, bool wakeable) {
  std::atomic<bool> ready{false};
  std::thread setter([&] {
    std::this_thread::sleep_for(delay);
    ready.store(true);
  });
  Waited w;
  Backoff backoff({0, 60000, nullptr, microseconds(0), nullptr, policy});
  const double cpu0 = ThreadCpuMs();
  while (!ready.load()) {
    absl::Status s = wakeable ? backoff.Idle([&](microseconds limit) {
      ++w.hook_calls;
      w.longest_hook = std::max(w.longest_hook, limit);
      std::this_thread::sleep_for(limit);
    })
                              : backoff.Idle();
    EXPECT_TRUE(s.ok()) << s;
  }
  w.cpu_ms = ThreadCpuMs() - cpu0;
  setter.join();
  w.counts = backoff.counts();
  return w;
}

TEST(WaitPolicy, SpinNeverYieldsOrSleeps) {
  for (bool wakeable : {false, true}) {
    const Waited w = WaitFor(WaitPolicy::kSpin, milliseconds(20), wakeable);
    EXPECT_GT(w.counts.polls, 64u);
    EXPECT_EQ(w.counts.yields, 0u);
    EXPECT_EQ(w.counts.naps, 0u);
    EXPECT_EQ(w.counts.sleeps, 0u);
    EXPECT_EQ(w.hook_calls, 0);
  }
}

TEST(WaitPolicy, YieldYieldsThenNaps) {
  const Waited w = WaitFor(WaitPolicy::kYield, milliseconds(30), true);
  EXPECT_GT(w.counts.yields, 0u);
  EXPECT_GT(w.counts.naps, 0u);  // past the 5 ms yield phase
  EXPECT_EQ(w.counts.sleeps, 0u);
  EXPECT_EQ(w.hook_calls, 0);  // yield never sleeps until woken
}

TEST(WaitPolicy, DefaultIsTakenAsYield) {
  const Waited w = WaitFor(WaitPolicy::kDefault, milliseconds(10), false);
  EXPECT_GT(w.counts.yields, 0u);
}

TEST(WaitPolicy, BlockSleepsThroughTheEnginesHook) {
  const Waited w = WaitFor(WaitPolicy::kBlock, milliseconds(50), true);
  EXPECT_EQ(w.counts.yields, 0u);
  EXPECT_EQ(w.counts.naps, 0u);
  EXPECT_GT(w.counts.sleeps, 0u);
  EXPECT_EQ(w.counts.sleeps, static_cast<uint64_t>(w.hook_calls));
  // Bounded, so that timeouts and aborts are still seen.
  EXPECT_GT(w.longest_hook.count(), 0);
  EXPECT_LE(w.longest_hook, milliseconds(10));
}

TEST(WaitPolicy, BlockNapsWhereItCannotBeWokenAndLeavesTheCore) {
  const Waited w = WaitFor(WaitPolicy::kBlock, milliseconds(100), false);
  EXPECT_EQ(w.counts.yields, 0u);
  EXPECT_GT(w.counts.naps, 0u);
  // Naps grow to 0.5 ms: about 200 wake-ups of a few us each, where a
  // spinning waiter would use all 100 ms it is scheduled for.
  EXPECT_LT(w.cpu_ms, 40.0) << w.counts.naps << " naps";
}

TEST(WaitPolicy, EveryPolicyTimesOut) {
  for (WaitPolicy p : {WaitPolicy::kSpin, WaitPolicy::kYield, WaitPolicy::kBlock}) {
    Backoff backoff({3, 20, nullptr, microseconds(0), nullptr, p});
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s;
    while (s.ok()) s = backoff.Idle([](microseconds limit) { std::this_thread::sleep_for(limit); });
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << Name(p) << ": " << s;
    EXPECT_NE(s.message().find("rank 3 waited 20 ms"), std::string::npos) << s;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << Name(p);
  }
}

TEST(Futex, ReturnsAtOnceWhenTheWordDiffers) {
  uint32_t word = 5;
  const auto t0 = std::chrono::steady_clock::now();
  FutexWait(&word, 4, std::chrono::seconds(10));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(Futex, AWakeEndsTheSleepBeforeItsLimit) {
  alignas(4) uint32_t word = 0;
  std::atomic_ref<uint32_t> w(word);
  std::thread waker([&] {
    std::this_thread::sleep_for(milliseconds(20));
    w.store(1);
    FutexWake(&word);
  });
  const auto t0 = std::chrono::steady_clock::now();
  while (w.load() == 0) FutexWait(&word, 0, std::chrono::seconds(30));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
  waker.join();
}

// Two ranks of one process (threads) meeting through a real shared-memory
// segment; the bootstrap's collectives are a thread barrier over one board.
struct TwoThreadBootstrap {
  std::barrier<> sync{2};
  std::vector<unsigned char> board = std::vector<unsigned char>(256);
  int mins[2] = {0, 0};

  ShmBootstrap For(int rank) {
    ShmBootstrap b;
    b.all_on_one_node = [] { return absl::StatusOr<bool>(true); };
    b.broadcast = [this, rank](void* bytes, size_t n) {
      if (rank == 0) std::memcpy(board.data(), bytes, n);
      sync.arrive_and_wait();
      if (rank != 0) std::memcpy(bytes, board.data(), n);
      sync.arrive_and_wait();
      return absl::OkStatus();
    };
    b.all_min = [this, rank](int* v) {
      mins[rank] = *v;
      sync.arrive_and_wait();
      *v = std::min(mins[0], mins[1]);
      sync.arrive_and_wait();
      return absl::OkStatus();
    };
    return b;
  }
};

TEST(WaitPolicy, BlockedSharedMemoryBarrierSleepsUntilTheLatePeer) {
  TwoThreadBootstrap boot;
  std::unique_ptr<NodeShm> shm[2];
  double cpu_ms[2] = {0, 0};
  absl::Status status[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::thread([&, r] {
      absl::StatusOr<std::unique_ptr<NodeShm>> s = NodeShm::Create(r, 2, 64 << 10, boot.For(r));
      if (!s.ok() || *s == nullptr) {
        status[r] = s.ok() ? absl::UnavailableError("no shared-memory segment") : s.status();
        boot.sync.arrive_and_drop();
        return;
      }
      shm[r] = std::move(*s);
      const Patience w{r, 60000, nullptr, microseconds(200), nullptr, WaitPolicy::kBlock};
      for (int i = 0; i < 5 && status[r].ok(); ++i) {
        boot.sync.arrive_and_wait();
        if (r == 1) std::this_thread::sleep_for(milliseconds(40));  // late: computing
        const double cpu0 = ThreadCpuMs();
        status[r] = shm[r]->Barrier(w);
        cpu_ms[r] += ThreadCpuMs() - cpu0;
      }
    });
  }
  for (auto& t : ranks) t.join();
  if (absl::IsUnavailable(status[0]) || absl::IsUnavailable(status[1])) GTEST_SKIP() << status[0] << status[1];
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  // Rank 0 waited about 200 ms in all: asleep, not polling.
  EXPECT_LT(cpu_ms[0], 60.0);
}

}  // namespace
}  // namespace p2p
}  // namespace weft
