// core/thread_pool.h: every index runs exactly once, nested and concurrent
// callers run inline instead of deadlocking, and a one-thread pool is inline.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace weft {
namespace {

TEST(ThreadPool, EveryIndexRunsOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](size_t i) { hits[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " threads, n " << n << ", i " << i;
    }
  }
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(3);
  std::atomic<int> inner{0};
  pool.ParallelFor(4, [&](size_t) { pool.ParallelFor(5, [&](size_t) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 20);
}

TEST(ThreadPool, ConcurrentCallersAllFinish) {
  ThreadPool pool(2);
  std::atomic<long> sum{0};
  auto job = [&] {
    for (int rep = 0; rep < 50; ++rep) pool.ParallelFor(64, [&](size_t i) { sum.fetch_add(static_cast<long>(i)); });
  };
  auto a = std::async(std::launch::async, job);
  auto b = std::async(std::launch::async, job);
  ASSERT_EQ(a.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  ASSERT_EQ(b.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  EXPECT_EQ(sum.load(), 2L * 50 * (63 * 64 / 2));
}

TEST(ThreadPool, OneThreadRunsOnTheCaller) {
  ThreadPool pool(1);
  const std::thread::id me = std::this_thread::get_id();
  bool all_on_caller = true;
  pool.ParallelFor(10, [&](size_t) { all_on_caller &= std::this_thread::get_id() == me; });
  EXPECT_TRUE(all_on_caller);
}

}  // namespace
}  // namespace weft
