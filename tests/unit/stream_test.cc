// core/stream.h: in-order execution, error reporting, registry.
#include "core/stream.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(HostStream, RunsInEnqueueOrder) {
  HostStream s;
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) {
    s.Enqueue([&order, i] {
      order.push_back(i);
      return absl::OkStatus();
    });
  }
  ASSERT_TRUE(s.Synchronize().ok());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_TRUE(s.Idle());
}

TEST(HostStream, EnqueueDoesNotWait) {
  HostStream s;
  std::atomic<bool> release{false};
  s.Enqueue([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return absl::OkStatus();
  });
  EXPECT_FALSE(s.Idle());  // the task is blocked, yet Enqueue returned
  release = true;
  EXPECT_TRUE(s.Synchronize().ok());
}

TEST(HostStream, WaitForAMarkLeavesLaterWorkRunning) {
  HostStream s;
  std::atomic<bool> release{false};
  std::atomic<int> first{0};
  s.Enqueue([&] {
    first = 1;
    return absl::OkStatus();
  });
  const uint64_t mark = s.Mark();
  s.Enqueue([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return absl::OkStatus();
  });
  s.WaitFor(mark);  // returns although the second task is still blocked
  EXPECT_EQ(first.load(), 1);
  EXPECT_FALSE(s.Idle());
  release = true;
  EXPECT_TRUE(s.Synchronize().ok());
}

// Waiters are woken only when the least mark any of them waits for is
// reached (core/stream.h): each must still return once its own mark is done,
// never before, whatever order the waiters arrived in.
TEST(HostStream, ManyWaitersOnDifferentMarksEachWakeAtTheirOwn) {
  constexpr int kTasks = 8;
  HostStream s;
  std::atomic<int> allowed{0}, ran{0};
  std::vector<uint64_t> marks;
  for (int i = 0; i < kTasks; ++i) {
    s.Enqueue([&, i] {
      while (allowed.load() <= i) std::this_thread::sleep_for(std::chrono::microseconds(200));
      ran = i + 1;
      return absl::OkStatus();
    });
    marks.push_back(s.Mark());
  }
  std::vector<std::thread> waiters;
  std::vector<int> seen(2 * kTasks, -1);
  for (int w = 0; w < 2 * kTasks; ++w) {
    const int target = (w * 5) % kTasks;  // waiters on the same and on different marks, out of order
    waiters.emplace_back([&, w, target] {
      s.WaitFor(marks[target]);
      seen[w] = ran.load();
    });
  }
  for (int i = 1; i <= kTasks; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    allowed = i;
  }
  for (auto& t : waiters) t.join();
  for (int w = 0; w < 2 * kTasks; ++w) EXPECT_GE(seen[w], (w * 5) % kTasks + 1) << "waiter " << w;
  ASSERT_TRUE(s.Synchronize().ok());
  // A Synchronize from a second thread while the first waits for a mark.
  s.Enqueue([] { return absl::OkStatus(); });
  std::thread other([&] { EXPECT_TRUE(s.Synchronize().ok()); });
  s.WaitFor(s.Mark());
  other.join();
  EXPECT_TRUE(s.Idle());
}

TEST(HostStream, ReportsFirstErrorOnceAndKeepsRunning) {
  HostStream s;
  int ran = 0;
  s.Enqueue([] { return absl::InvalidArgumentError("first"); });
  s.Enqueue([] { return absl::InternalError("second"); });
  s.Enqueue([&] { ++ran; return absl::OkStatus(); });
  const absl::Status st = s.Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "first");
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(s.Synchronize().ok());  // cleared
}

TEST(HostStream, ExceptionBecomesInternalError) {
  HostStream s;
  s.Enqueue([]() -> absl::Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(s.Synchronize().code(), absl::StatusCode::kInternal);
}

TEST(HostStream, ReachedAtTimesEachMark) {
  using Clock = std::chrono::steady_clock;
  HostStream s;
  const auto before = Clock::now();
  std::atomic<bool> go{false};
  Clock::time_point first_ran{}, second_ran{};
  s.Enqueue([&] {
    while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    first_ran = Clock::now();
    return absl::OkStatus();
  });
  const uint64_t first = s.Mark();
  s.Enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    second_ran = Clock::now();
    return absl::OkStatus();
  });
  const uint64_t second = s.Mark();
  EXPECT_EQ(s.ReachedAt(first).status().code(), absl::StatusCode::kFailedPrecondition);
  go = true;
  ASSERT_TRUE(s.Synchronize().ok());
  ASSERT_TRUE(s.ReachedAt(0).ok());
  EXPECT_LE(*s.ReachedAt(0), before);
  const auto t1 = s.ReachedAt(first), t2 = s.ReachedAt(second);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_GE(*t1, first_ran);
  EXPECT_LT(*t1, second_ran);  // the second task slept 20 ms after the first finished
  EXPECT_GE(*t2, second_ran);
  // Old marks are forgotten, never misreported.
  for (uint64_t i = 0; i < HostStream::kTimedMarks; ++i) s.Enqueue([] { return absl::OkStatus(); });
  ASSERT_TRUE(s.Synchronize().ok());
  EXPECT_EQ(s.ReachedAt(first).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(s.ReachedAt(s.Mark()).ok());
}

// The address of a stream that existed and was destroyed (as an integer:
// nothing may dereference it, only the registry may be asked about it).
__attribute__((noinline)) uintptr_t DestroyedStreamAddress() {
  auto s = std::make_unique<HostStream>();
  EXPECT_EQ(HostStream::Find(s.get()), s.get());
  return reinterpret_cast<uintptr_t>(s.get());
}

// waiters_run: a waiter runs pending tasks itself when the stream's thread
// is not running one. Which thread wins a task is a race with the stream's
// thread waking up, so the waiter's share is counted over many rounds; the
// order, the errors and the later work are exact whoever runs what.
TEST(HostStream, WaitersRunPendingWorkOnTheirThreadInOrder) {
  for (bool waiters_run : {false, true}) {
    HostStream s(waiters_run);
    const auto me = std::this_thread::get_id();
    std::vector<int> order;
    int on_waiter = 0;
    for (int round = 0; round < 200; ++round) {
      for (int k = 0; k < 3; ++k) {
        s.Enqueue([&, k] {
          order.push_back(k);
          on_waiter += std::this_thread::get_id() == me;
          return k == 1 ? absl::InternalError("task 1 failed") : absl::OkStatus();
        });
      }
      const absl::Status st = s.Synchronize();
      ASSERT_EQ(st.message(), "task 1 failed") << "round " << round;
    }
    ASSERT_EQ(order.size(), 600u);
    for (size_t i = 0; i < order.size(); ++i) ASSERT_EQ(order[i], static_cast<int>(i % 3)) << i;
    if (waiters_run) {
      EXPECT_GT(on_waiter, 0) << "no task ran on the waiting thread in 200 rounds";
    } else {
      EXPECT_EQ(on_waiter, 0);
    }
    EXPECT_TRUE(s.Idle());
  }
}

// issuer_cpu: each task runs on the CPU its enqueuing thread was on. The
// test's thread is pinned to each of its CPUs in turn, so where it enqueues
// is known, and each task reports where it ran and on how many CPUs its
// thread may run. Without the flag the stream's thread is never narrowed.
TEST(HostStream, IssuerCpuRunsEachTaskOnItsIssuersCpu) {
  cpu_set_t start;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(start), &start), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &start)) cpus.push_back(c);
  }
  ASSERT_FALSE(cpus.empty());
  for (bool issuer_cpu : {true, false}) {
    HostStream s(/*waiters_run=*/false, issuer_cpu);  // made before the narrowing: it may follow to any CPU
    for (int round = 0; round < 3; ++round) {
      for (int c : cpus) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
        int ran_on = -2, allowed = 0;
        s.Enqueue([&] {
          ran_on = sched_getcpu();
          cpu_set_t now;
          if (pthread_getaffinity_np(pthread_self(), sizeof(now), &now) == 0) allowed = CPU_COUNT(&now);
          return absl::OkStatus();
        });
        ASSERT_TRUE(s.Synchronize().ok());
        if (issuer_cpu) {
          EXPECT_EQ(ran_on, c) << "round " << round;
          EXPECT_EQ(allowed, 1);
        } else {
          EXPECT_EQ(allowed, static_cast<int>(cpus.size())) << "a stream without issuer_cpu was narrowed";
        }
      }
    }
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(start), &start), 0);
  }
}

// A waiter runs only up to its own mark; what is enqueued after it goes to
// the stream's thread, which must not have been left asleep.
TEST(HostStream, WorkAfterAWaitersMarkStillRuns) {
  HostStream s(/*waiters_run=*/true);
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  s.Enqueue([&] {
    ++ran;
    return absl::OkStatus();
  });
  const uint64_t mark = s.Mark();
  s.Enqueue([&] {
    while (!release.load()) std::this_thread::yield();
    ++ran;
    return absl::OkStatus();
  });
  s.WaitFor(mark);
  EXPECT_GE(ran.load(), 1);
  release = true;
  ASSERT_TRUE(s.Synchronize().ok());
  EXPECT_EQ(ran.load(), 2);
  // And with nobody waiting, enqueued work runs on the stream's own thread.
  std::atomic<bool> done{false};
  s.Enqueue([&] {
    done = true;
    return absl::OkStatus();
  });
  const auto t0 = std::chrono::steady_clock::now();
  while (!done.load() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(done.load());
}

// Two threads waiting on one waiters_run stream while more work arrives:
// every task runs once, in order.
TEST(HostStream, ConcurrentWaitersRunEachTaskOnce) {
  HostStream s(/*waiters_run=*/true);
  std::vector<int> order;
  std::atomic<bool> stop{false};
  std::thread other([&] {
    while (!stop.load()) s.Synchronize().IgnoreError();
  });
  for (int i = 0; i < 2000; ++i) {
    s.Enqueue([&order, i] {
      order.push_back(i);
      return absl::OkStatus();
    });
    if (i % 7 == 0) {
      ASSERT_TRUE(s.Synchronize().ok());
    }
  }
  ASSERT_TRUE(s.Synchronize().ok());
  stop = true;
  other.join();
  ASSERT_EQ(order.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(order[i], i);
}

TEST(HostStream, RegistryKnowsLiveStreamsOnly) {
  int x = 0;
  EXPECT_EQ(HostStream::Find(&x), nullptr);
  EXPECT_EQ(HostStream::Find(nullptr), nullptr);
  EXPECT_EQ(HostStream::Find(reinterpret_cast<const void*>(DestroyedStreamAddress())), nullptr);
}

}  // namespace
}  // namespace weft
