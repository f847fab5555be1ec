// The argument checks the Communicator's entry points share
// (communicator.cc, point_to_point.cc): enums, byte counts that must not
// overflow, and overlapping buffers.
//
//   ASSIGN_OR_RETURN(size_t bytes, Bytes("count", count, 1, t));
#ifndef WEFT_COMM_ARGUMENTS_H_
#define WEFT_COMM_ARGUMENTS_H_

#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/status.h"

namespace weft {

// `op` may be null (a collective without one).
inline absl::Status CheckTypeOp(DataType t, const RedOp* op) {
  if (!IsValid(t)) {
    return InvalidArgument("datatype = %d is not a weftDataType_t (expected 0..%d)", static_cast<int>(t),
                           kNumDataTypes - 1);
  }
  if (op != nullptr && !IsValid(*op)) {
    return InvalidArgument("op = %d is not a weftRedOp_t (expected 0..%d)", static_cast<int>(*op), kNumRedOps - 1);
  }
  return absl::OkStatus();
}

// bytes = count * nblocks * ElementSize(t), refusing overflow.
inline absl::StatusOr<size_t> Bytes(const char* what, size_t count, size_t nblocks, DataType t) {
  const size_t es = ElementSize(t);
  if (nblocks != 0 && count > std::numeric_limits<size_t>::max() / es / nblocks) {
    return InvalidArgument("%s = %zu elements of %s times %zu ranks overflows size_t", what, count, Name(t),
                           nblocks);
  }
  return count * nblocks * es;
}

inline bool Overlap(const void* a, size_t an, const void* b, size_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return an != 0 && bn != 0 && x < y + bn && y < x + an;
}

}  // namespace weft

#endif  // WEFT_COMM_ARGUMENTS_H_
