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
#include "core/dtype.h"
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

// A weftDataType_t argument as weft's own type (the values are equal; the
// caller has checked that it is one of them).
inline DataType DataTypeOf(const weftDataType_t& t) { return static_cast<DataType>(EnumValue(t)); }

// Every size a versioned struct (weft/types.h, "Structs") has had in a
// weft header, oldest first; the last is sizeof in this one. A field
// appended to a struct appends the new size here, and to tests/abi's frozen
// sizes.
template <typename T>
struct SizedStruct;
template <>
struct SizedStruct<weftConfig_t> {
  static constexpr const char* kName = "weftConfig_t";
  static constexpr size_t kSizes[] = {32, 40, 48, 56};
};
template <>
struct SizedStruct<weftStore_t> {
  static constexpr const char* kName = "weftStore_t";
  static constexpr size_t kSizes[] = {32};
};
template <>
struct SizedStruct<weftReducerConfig_t> {
  static constexpr const char* kName = "weftReducerConfig_t";
  static constexpr size_t kSizes[] = {56};
};
template <>
struct SizedStruct<weftShardGroupConfig_t> {
  static constexpr const char* kName = "weftShardGroupConfig_t";
  static constexpr size_t kSizes[] = {24};
};
template <>
struct SizedStruct<weftKernelConfig_t> {
  static constexpr const char* kName = "weftKernelConfig_t";
  static constexpr size_t kSizes[] = {16};
};
template <>
struct SizedStruct<weftShardScheduleConfig_t> {
  static constexpr const char* kName = "weftShardScheduleConfig_t";
  static constexpr size_t kSizes[] = {40, 48};
};

// Reads a caller's versioned struct of one of `known` sizes into `out`,
// which holds the defaults: copies the first caller_size bytes, then sets
// out's size to the current one. Any other size (0 included) is refused,
// naming `what`, the struct, the size given and the sizes known.
absl::Status ReadSized(const char* what, const char* type, const void* in, const size_t* known, size_t nknown,
                       size_t current_size, void* out);

template <typename T>
absl::Status ReadSized(const char* what, const T* in, T* out) {
  using S = SizedStruct<T>;
  constexpr size_t n = sizeof(S::kSizes) / sizeof(S::kSizes[0]);
  static_assert(S::kSizes[n - 1] == sizeof(T), "a versioned struct changed size: append its new size to kSizes");
  return ReadSized(what, S::kName, in, S::kSizes, n, sizeof(T), out);
}

}  // namespace capi
}  // namespace weft

#endif  // WEFT_CAPI_RESULT_H_
