// A small fixed pool of threads for the host kernels' large inputs.
//
// ParallelFor(n, fn) runs fn(0) .. fn(n-1) on the pool's workers and the
// calling thread together and returns when all have run. One job runs at a
// time: a caller that finds the pool busy (another host stream's kernel, or a
// ParallelFor nested inside fn) runs its whole job inline instead of waiting,
// so the pool can never deadlock and never oversubscribes the cores.
//
//   ThreadPool::Default().ParallelFor(tasks.size(), [&](size_t i) { Run(tasks[i]); });
//
// Default() has WEFT_NUM_THREADS threads counting the caller (core/env.h; 0:
// the hardware threads, at most 8); 1 means everything runs inline.
#ifndef WEFT_CORE_THREAD_POOL_H_
#define WEFT_CORE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace weft {

class ThreadPool {
 public:
  // `threads` counts the calling thread: threads - 1 workers are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

  static ThreadPool& Default();

 private:
  void WorkerLoop();
  void Drain();  // runs indices of the current job until none is left

  std::mutex run_mu_;  // held by the caller whose job the pool is running
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  size_t busy_workers_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace weft

#endif  // WEFT_CORE_THREAD_POOL_H_
