#include "capi/result.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

#include "capi/export.h"
#include "core/status.h"

namespace weft {
namespace capi {
namespace {

thread_local std::string t_last_error;

}  // namespace

weftResult_t ToResult(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return weftSuccess;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return weftInvalidArgument;
    case absl::StatusCode::kFailedPrecondition: return weftInvalidUsage;
    case absl::StatusCode::kUnimplemented: return weftUnsupported;
    case absl::StatusCode::kInternal: return weftInternalError;
    case absl::StatusCode::kUnavailable: return weftRemoteError;
    case absl::StatusCode::kDeadlineExceeded: return weftTimeout;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled: return weftAborted;
    default: return weftSystemError;
  }
}

weftResult_t Fail(const char* fn, const absl::Status& s) {
  try {
    t_last_error = std::string(fn) + ": " + std::string(s.message());
  } catch (...) {
    // Out of memory while formatting: keep whatever message was there.
  }
  return ToResult(s);
}

absl::Status ReadSized(const char* what, const char* type, const void* in, const size_t* known, size_t nknown,
                       size_t current_size, void* out) {
  size_t caller_size;
  std::memcpy(&caller_size, in, sizeof(size_t));
  for (size_t i = 0; i < nknown; ++i) {
    if (caller_size == known[i]) {
      std::memcpy(out, in, caller_size);
      std::memcpy(out, &current_size, sizeof(size_t));
      return absl::OkStatus();
    }
  }
  std::string sizes;
  for (size_t i = 0; i < nknown; ++i) absl::StrAppend(&sizes, i == 0 ? "" : ", ", known[i]);
  if (caller_size > current_size) {
    return InvalidArgument("%s->size = %zu is larger than any size of %s this libweft knows (%s): the caller was "
                           "built against a newer weft.h than the library loaded", what, caller_size, type, sizes);
  }
  return InvalidArgument("%s->size = %zu is not a size %s has had (%s): initialise the struct with its "
                         "_INITIALIZER macro", what, caller_size, type, sizes);
}

}  // namespace capi
}  // namespace weft

WEFT_API const char* weftGetLastError(void) { return weft::capi::t_last_error.c_str(); }

WEFT_API weftResult_t weftGetVersion(int* version) {
  if (version == nullptr) {
    return weft::capi::Fail("weftGetVersion", weft::InvalidArgument("version is NULL"));
  }
  *version = WEFT_VERSION_CODE;
  return weftSuccess;
}

WEFT_API const char* weftGetErrorString(weftResult_t result) {
  switch (result) {
    case weftSuccess: return "no error";
    case weftInvalidArgument: return "invalid argument";
    case weftInvalidUsage: return "invalid usage";
    case weftUnsupported: return "unsupported by this build or machine";
    case weftSystemError: return "system or library error";
    case weftInternalError: return "internal error (a bug in weft)";
    case weftRemoteError: return "remote error (another rank failed)";
    case weftTimeout: return "timed out waiting for peers";
    case weftAborted: return "communicator aborted";
    case weftInProgress: return "operation in progress";
    default: return "unknown weft result code";
  }
}
