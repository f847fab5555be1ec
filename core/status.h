// Status helpers used everywhere inside weft.
//
// weft returns absl::Status / absl::StatusOr internally and turns them into a
// weftResult_t only at the C ABI (capi/). Each weft result code has one
// absl code, so the mapping back is exact:
//
//   return weft::InvalidArgument("count = %d is negative", n);
//   RETURN_IF_ERROR(comm.AllReduce(...));
//   ASSIGN_OR_RETURN(auto plan, MakePlan(...));
//
// Debian's Abseil (20220623) ships neither status macros nor absl/log, so
// they live here.
#ifndef WEFT_CORE_STATUS_H_
#define WEFT_CORE_STATUS_H_

#include <atomic>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace weft {

// One absl code per weft result code (capi/result.cc maps them back).
template <typename... Args>
absl::Status InvalidArgument(const absl::FormatSpec<Args...>& f, const Args&... a) {
  return absl::InvalidArgumentError(absl::StrFormat(f, a...));
}
// weftInvalidUsage: valid alone, wrong now (ranks disagree, wrong order).
template <typename... Args>
absl::Status InvalidUsage(const absl::FormatSpec<Args...>& f, const Args&... a) {
  return absl::FailedPreconditionError(absl::StrFormat(f, a...));
}
template <typename... Args>
absl::Status Unsupported(const absl::FormatSpec<Args...>& f, const Args&... a) {
  return absl::UnimplementedError(absl::StrFormat(f, a...));
}
// weftSystemError: a system call or an underlying library (CUDA, MPI, NCCL, UCX) failed.
template <typename... Args>
absl::Status SystemError(const absl::FormatSpec<Args...>& f, const Args&... a) {
  return absl::UnknownError(absl::StrFormat(f, a...));
}
template <typename... Args>
absl::Status InternalError(const absl::FormatSpec<Args...>& f, const Args&... a) {
  return absl::InternalError(absl::StrFormat(f, a...));
}
// weftRemoteError: another rank failed.
template <typename... Args>
absl::Status RemoteError(const absl::FormatSpec<Args...>& f, const Args&... a) {
  return absl::UnavailableError(absl::StrFormat(f, a...));
}
template <typename... Args>
absl::Status Timeout(const absl::FormatSpec<Args...>& f, const Args&... a) {
  return absl::DeadlineExceededError(absl::StrFormat(f, a...));
}
template <typename... Args>
absl::Status Aborted(const absl::FormatSpec<Args...>& f, const Args&... a) {
  return absl::AbortedError(absl::StrFormat(f, a...));
}

// Prefixes a status message with context ("all_reduce: ...") keeping its code.
absl::Status Annotate(const absl::Status& s, std::string_view context);

// The first error of something shared by threads (a communicator whose
// receives run beside its collectives): set once, kept, read by any of them.
//
//   broken_.Set(s);                           // no-op for OK, or once set
//   if (!broken_.ok()) return broken_.get();
class FirstError {
 public:
  bool ok() const { return !set_.load(std::memory_order_acquire); }
  absl::Status get() const {
    if (ok()) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  void Set(const absl::Status& s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (set_.load(std::memory_order_relaxed)) return;
    status_ = s;
    set_.store(true, std::memory_order_release);
  }

 private:
  mutable std::mutex mu_;
  absl::Status status_;
  std::atomic<bool> set_{false};
};

}  // namespace weft

#define WEFT_STATUS_CONCAT_INNER_(a, b) a##b
#define WEFT_STATUS_CONCAT_(a, b) WEFT_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status weft_status_ = (expr);              \
    if (!weft_status_.ok()) return weft_status_;       \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(WEFT_STATUS_CONCAT_(weft_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // WEFT_CORE_STATUS_H_
