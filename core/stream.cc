#include "core/stream.h"

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

HostStream::HostStream() : created_(std::chrono::steady_clock::now()) {
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Registry().insert(this);
  }
  thread_ = std::thread([this] { Run(); });
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
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
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

// Every waiter lowers wake_at_ to its mark; the worker wakes them all when
// the least one is reached, and those still short of theirs lower it again.
void HostStream::WaitDone(std::unique_lock<std::mutex>& lock, uint64_t mark) {
  while (done_ < mark) {
    wake_at_ = std::min(wake_at_, mark);
    done_cv_.wait(lock);
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

void HostStream::Run() {
  trace::NameThisThread("weft host stream");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    while (!stop_ && queue_.empty()) {
      worker_asleep_ = true;
      work_cv_.wait(lock);
      worker_asleep_ = false;
    }
    if (queue_.empty()) return;  // stop_ and drained
    Task task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    absl::Status s;
    try {
      s = task();
    } catch (...) {
      s = absl::InternalError("host stream task threw an exception");
    }
    const auto finished = std::chrono::steady_clock::now();
    lock.lock();
    if (!s.ok() && first_error_.ok()) first_error_ = s;
    done_at_[done_ % kTimedMarks] = finished;
    ++done_;
    if (done_ >= wake_at_) {
      wake_at_ = UINT64_MAX;
      done_cv_.notify_all();
    }
  }
}

}  // namespace weft
