// The one place where absl::Status becomes a weftResult_t.
//
// Every entry point is written as
//
//   WEFT_API weftResult_t weftFoo(...) {
//     return weft::capi::Guard("weftFoo", [&]() -> absl::Status { ... });
//   }
//
// Guard runs the body, maps the status to a result code, stores the message
// as this thread's last error, and turns any escaping C++ exception
// (std::bad_alloc, say) into weftSystemError/weftInternalError instead of
// letting it cross the ABI.
#ifndef WEFT_CAPI_RESULT_H_
#define WEFT_CAPI_RESULT_H_

#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "weft/weft.h"

namespace weft {
namespace capi {

weftResult_t ToResult(const absl::Status& s);
// Records `s` as this thread's last error (prefixed with the entry point), returns its code.
weftResult_t Fail(const char* fn, const absl::Status& s);

template <typename F>
weftResult_t Guard(const char* fn, F&& body) noexcept {
  try {
    absl::Status s = body();
    if (s.ok()) return weftSuccess;
    return Fail(fn, s);
  } catch (const std::bad_alloc&) {
    return Fail(fn, absl::UnknownError("out of host memory"));
  } catch (const std::exception& e) {
    return Fail(fn, absl::InternalError(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return Fail(fn, absl::InternalError("unexpected exception"));
  }
}

// The int a caller passed as an enum argument or field. A C caller (or
// ctypes) may pass any int there; loading one outside the enumerators as the
// C++ enum type is undefined behaviour, so the bytes are read as an int and
// checked as one.
template <typename E>
int EnumValue(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "a C enum is int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Reads a caller's extensible struct (size-stamped, weft.h "Extensible
// structs") into `out`, which holds the defaults: copies the first
// caller_size bytes. Refuses a size of 0, one smaller than the size field,
// and one larger than this library knows.
absl::Status ReadSized(const char* what, const void* in, size_t known_size, void* out);

}  // namespace capi
}  // namespace weft

#endif  // WEFT_CAPI_RESULT_H_
