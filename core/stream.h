// Host streams: in-order queues of host work, each run by a thread of its own.
//
// A HostStream is to host collectives and kernels what a cudaStream_t is to
// device work: the caller enqueues and goes on (computing the next layer's
// gradients, say) while the stream's thread runs the work in enqueue order.
//
//   HostStream s;
//   s.Enqueue([&] { return comm.AllReduce(...); });
//   ... compute ...
//   RETURN_IF_ERROR(s.Synchronize());   // first error since the last sync
//
// Every live stream is registered so that the C ABI can tell a weftStream_t
// from any other pointer (a cudaStream_t, garbage) without dereferencing it.
#ifndef WEFT_CORE_STREAM_H_
#define WEFT_CORE_STREAM_H_

#include <sched.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weft {

class HostStream {
 public:
  using Task = std::function<absl::Status()>;

  // With `waiters_run`, a thread that waits for the stream (Synchronize,
  // WaitFor) runs the pending tasks itself, in order, whenever the stream's
  // thread is not running one: a blocking caller then pays no hand-off to
  // the stream's thread and back, which on a machine whose idle cores sleep
  // (a VM's halted vCPUs above all) costs a wake-up each way. Work enqueued
  // without a waiter still starts at once on the stream's thread.
  //
  // With `issuer_cpu`, the stream's thread runs each task on the CPU that
  // the thread which enqueued it was running on when it did (its affinity
  // narrowed to that CPU, changed only when the issuer has moved). This is
  // for ranks that have no core to spare for communication, several ranks
  // of a node each computing on its share of the cores: a rank then pays
  // for its own collectives on its own core instead of wherever the
  // scheduler put the thread, and ranks whose issuing threads are on
  // different cores never find two of their stream threads on one core,
  // where the lockstep rounds of a shared-memory collective would take a
  // context switch each. Where the affinity cannot be narrowed (the CPU is
  // outside the thread's own set, or the call fails), the task runs where
  // the thread is. Tasks a waiter runs (`waiters_run`) run on the waiter.
  explicit HostStream(bool waiters_run = false, bool issuer_cpu = false);
  ~HostStream();  // runs what is queued, then joins the thread
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Never blocks on the work itself. Tasks run in enqueue order.
  void Enqueue(Task task);
  // A task that takes the first error since the last Synchronize (clearing
  // it, as Synchronize does) and hands it to `fn`, on the stream's thread.
  void EnqueueCallback(std::function<void(absl::Status)> fn);
  // Blocks until every task enqueued before the call has run; returns the
  // first error since the last Synchronize and clears it.
  absl::Status Synchronize();
  // An event: the number of tasks enqueued so far. WaitFor(mark) blocks
  // until those have run (not the ones enqueued after), so a caller can wait
  // for one piece of work without draining the stream.
  uint64_t Mark();
  void WaitFor(uint64_t mark);
  // When the stream reached `mark` (its last task before the mark finished),
  // like the elapsed time of a CUDA event with timing: profilers and
  // benchmarks use it to tell when a piece of work completed, as opposed to
  // when a thread noticed. FailedPrecondition before the mark is reached;
  // OutOfRange once more than kTimedMarks tasks ran after it; mark 0 is the
  // stream's creation.
  static constexpr uint64_t kTimedMarks = 1024;
  absl::StatusOr<std::chrono::steady_clock::time_point> ReachedAt(uint64_t mark);
  // True when nothing is queued or running.
  bool Idle();
  // The first error since the last Synchronize, without clearing it.
  absl::Status PendingError();

  // The live stream at `p`, or nullptr if `p` is not one.
  static HostStream* Find(const void* p);

 private:
  void Run();
  void WaitDone(std::unique_lock<std::mutex>& lock, uint64_t mark);
  // Runs the task at the front of the queue on this thread: the caller
  // holds `lock`, the queue is not empty and no thread is running a task.
  // `worker`: the caller is the stream's own thread (which follows the
  // issuer's CPU with `issuer_cpu`), not a waiter.
  void RunFront(std::unique_lock<std::mutex>& lock, bool worker);
  // Narrows this thread's affinity to `cpu` (issuer_cpu_); see the constructor.
  void FollowIssuer(int cpu);

  // Waits for one stream's tasks with as few wake-ups as possible: on a
  // loaded host every futex wake is a context switch that the stream's own
  // thread (running a collective its peers wait on) pays for. So the worker
  // is signalled only when it sleeps, and waiters only when the earliest
  // mark one of them waits for is reached, not after every task.
  std::mutex mu_;
  std::condition_variable work_cv_;  // the worker: a task or stop_
  std::condition_variable done_cv_;  // Synchronize / WaitFor
  const bool waiters_run_;
  const bool issuer_cpu_;
  // The worker's own: the CPU it is narrowed to (or -1) and the set it
  // started with (FollowIssuer).
  int pinned_cpu_ = -1;
  cpu_set_t allowed_;
  bool worker_asleep_ = false;
  bool running_ = false;             // a thread (the worker or a waiter) is running a task
  uint64_t wake_at_ = UINT64_MAX;    // the least mark a waiter waits for
  struct Queued {
    Task task;
    int cpu;  // where the issuer was (issuer_cpu_), else -1
  };
  std::deque<Queued> queue_;
  uint64_t enqueued_ = 0;
  uint64_t done_ = 0;
  std::chrono::steady_clock::time_point created_;
  std::array<std::chrono::steady_clock::time_point, kTimedMarks> done_at_{};  // task k at [(k - 1) % kTimedMarks]
  bool stop_ = false;
  absl::Status first_error_;
  std::thread thread_;
};

}  // namespace weft

#endif  // WEFT_CORE_STREAM_H_
