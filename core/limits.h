// Bounds on the sizes a caller may pass, so that a count whose byte size
// overflows, or is larger than any machine's memory, is refused with a
// message instead of wrapping a pointer or running a loop over 2^64
// elements.
//
//   ASSIGN_OR_RETURN(size_t bytes, CheckedBytes("srcs[3].count", count, ElementSize(t)));
#ifndef WEFT_CORE_LIMITS_H_
#define WEFT_CORE_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/status.h"

namespace weft {

// No buffer is larger: 64 PiB, the user half of a 57-bit (5-level paging)
// address space.
inline constexpr size_t kMaxBufferBytes = size_t{1} << 56;
// No world has more ranks (a UCX tag carries a rank in 20 bits).
inline constexpr int kMaxRanks = 1 << 20;

// count * elem_bytes, or InvalidArgument naming `what` when that overflows
// or exceeds kMaxBufferBytes.
inline absl::StatusOr<size_t> CheckedBytes(std::string_view what, size_t count, size_t elem_bytes) {
  if (elem_bytes != 0 && count > kMaxBufferBytes / elem_bytes) {
    return InvalidArgument("%s = %zu elements of %zu bytes is more than any buffer holds (at most %zu bytes)", what,
                           count, elem_bytes, kMaxBufferBytes);
  }
  return count * elem_bytes;
}

// a + b, or InvalidArgument naming `what` when it overflows.
inline absl::StatusOr<size_t> CheckedAdd(std::string_view what, size_t a, size_t b) {
  if (a > SIZE_MAX - b) return InvalidArgument("%s: %zu + %zu overflows size_t", what, a, b);
  return a + b;
}

}  // namespace weft

#endif  // WEFT_CORE_LIMITS_H_
