#include "core/stream.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "core/trace.h"

namespace weft {
namespace {

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
absl::flat_hash_set<const void*>& Registry() {
  static auto* set = new absl::flat_hash_set<const void*>();
  return *set;
}

}  // namespace

HostStream::HostStream(bool waiters_run, bool issuer_cpu)
    : waiters_run_(waiters_run), issuer_cpu_(issuer_cpu), created_(std::chrono::steady_clock::now()) {
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Registry().insert(this);
  }
  thread_ = std::thread([this] { Run(); });
  // What top -H, ps -L, gdb and /proc/<pid>/task/*/comm show (at most 15
  // characters). Named here, not by the thread itself, so that the name is
  // there once the stream exists.
  pthread_setname_np(thread_.native_handle(), "weft-stream");
}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Registry().erase(this);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

HostStream* HostStream::Find(const void* p) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return Registry().contains(p) ? static_cast<HostStream*>(const_cast<void*>(p)) : nullptr;
}

void HostStream::Enqueue(Task task) {
  const int cpu = issuer_cpu_ ? sched_getcpu() : -1;  // -1 where it fails too
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(task), cpu});
    ++enqueued_;
    wake = worker_asleep_;
  }
  if (wake) work_cv_.notify_one();
}

void HostStream::EnqueueCallback(std::function<void(absl::Status)> fn) {
  Enqueue([this, fn = std::move(fn)]() -> absl::Status {
    absl::Status error;
    {
      std::lock_guard<std::mutex> lock(mu_);
      error = std::exchange(first_error_, absl::OkStatus());
    }
    fn(std::move(error));
    return absl::OkStatus();
  });
}

// Every waiter lowers wake_at_ to its mark; whoever runs the task that
// reaches the least one wakes them all, and those still short of theirs
// lower it again. Where waiters run, a waiter that finds a task pending and
// nobody running one runs it, until its own mark is reached.
void HostStream::WaitDone(std::unique_lock<std::mutex>& lock, uint64_t mark) {
  while (done_ < mark) {
    if (waiters_run_ && !running_ && !queue_.empty()) {
      RunFront(lock, /*worker=*/false);
      continue;
    }
    wake_at_ = std::min(wake_at_, mark);
    done_cv_.wait(lock);
  }
  // What was enqueued after `mark` is the worker's again, which may have
  // found this thread running and gone back to sleep.
  if (waiters_run_ && !running_ && worker_asleep_ && (!queue_.empty() || stop_)) work_cv_.notify_one();
}

void HostStream::RunFront(std::unique_lock<std::mutex>& lock, bool worker) {
  Task task = std::move(queue_.front().task);
  const int cpu = queue_.front().cpu;
  queue_.pop_front();
  running_ = true;
  lock.unlock();
  if (worker && issuer_cpu_) FollowIssuer(cpu);
  absl::Status s;
  try {
    s = task();
  } catch (...) {
    s = absl::InternalError("host stream task threw an exception");
  }
  const auto finished = std::chrono::steady_clock::now();
  lock.lock();
  running_ = false;
  if (!s.ok() && first_error_.ok()) first_error_ = s;
  done_at_[done_ % kTimedMarks] = finished;
  ++done_;
  if (done_ >= wake_at_) {
    wake_at_ = UINT64_MAX;
    done_cv_.notify_all();
  }
}

absl::Status HostStream::Synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  WaitDone(lock, enqueued_);
  return std::exchange(first_error_, absl::OkStatus());
}

uint64_t HostStream::Mark() {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

void HostStream::WaitFor(uint64_t mark) {
  std::unique_lock<std::mutex> lock(mu_);
  WaitDone(lock, mark);
}

absl::StatusOr<std::chrono::steady_clock::time_point> HostStream::ReachedAt(uint64_t mark) {
  std::lock_guard<std::mutex> lock(mu_);
  if (mark == 0) return created_;
  if (mark > done_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("ReachedAt: mark %u is not reached yet (%u tasks done)", mark, done_));
  }
  if (done_ - mark >= kTimedMarks) {
    return absl::OutOfRangeError(absl::StrFormat(
        "ReachedAt: mark %u is too old (%u tasks done, the last %u are timed)", mark, done_, kTimedMarks));
  }
  return done_at_[(mark - 1) % kTimedMarks];
}

bool HostStream::Idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ == enqueued_;
}

absl::Status HostStream::PendingError() {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

void HostStream::FollowIssuer(int cpu) {
  // CPU_ISSET is false beyond the set's size, and for every CPU of an empty set.
  if (cpu < 0 || cpu == pinned_cpu_ || !CPU_ISSET(cpu, &allowed_)) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0) pinned_cpu_ = cpu;
}

void HostStream::Run() {
  trace::NameThisThread("weft host stream");
  // The CPUs the thread may follow its issuers to: the set it started with,
  // its creator's (a launcher's or a cpuset's binding), never beyond it;
  // none where it does not follow them or the set cannot be read.
  if (!issuer_cpu_ || pthread_getaffinity_np(pthread_self(), sizeof(allowed_), &allowed_) != 0) CPU_ZERO(&allowed_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // A waiter may be running a task (waiters_run_): the next one waits for it.
    while (running_ || (!stop_ && queue_.empty())) {
      worker_asleep_ = true;
      work_cv_.wait(lock);
      worker_asleep_ = false;
    }
    if (queue_.empty()) return;  // stop_ and drained
    RunFront(lock, /*worker=*/true);
  }
}

}  // namespace weft
