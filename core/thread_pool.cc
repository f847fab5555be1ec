#include "core/thread_pool.h"

#include <algorithm>

#include "core/env.h"

namespace weft {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

ThreadPool& ThreadPool::Default() {
  // Never destroyed: kernels may still run on host streams while statics are torn down.
  static ThreadPool* pool = [] {
    int n = Env::Get().num_threads;
    if (n == 0) n = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
    Log(LogLevel::kInfo, "host kernel thread pool: %d threads", n);
    return new ThreadPool(n);
  }();
  return *pool;
}

void ThreadPool::Drain() {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_) return;
    (*fn_)(i);
  }
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  std::unique_lock<std::mutex> owner(run_mu_, std::defer_lock);
  if (n <= 1 || workers_.empty() || !owner.try_lock()) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0, std::memory_order_relaxed);
    busy_workers_ = workers_.size();
    ++generation_;
  }
  start_cv_.notify_all();
  Drain();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return busy_workers_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    lock.unlock();
    Drain();
    lock.lock();
    if (--busy_workers_ == 0) done_cv_.notify_one();
  }
}

}  // namespace weft
