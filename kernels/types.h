// The plain data the kernels work on, shared by every implementation.
//
// No Abseil and no STL here: kernels/cuda/*.cu includes this header through
// kernels/device.h. A TensorRef is a flat view of one tensor; a Segment is one
// run of consecutive elements to convert from one buffer into another, the
// form every copy-like kernel (flatten, unflatten, chunk-cat, chunk-split) is
// reduced to before it reaches an implementation.
//
//   TensorRef grad{ptr, 4096, DataType::kFloat32};
//   Segment s{grad.data, DataType::kFloat32, bucket, DataType::kBfloat16, grad.count};
#ifndef WEFT_KERNELS_TYPES_H_
#define WEFT_KERNELS_TYPES_H_

#include <cstddef>

#include "core/dtype.h"

namespace weft {
namespace kernels {

// Bytes per element of the four floating types the kernels take (checked
// before any kernel runs); inline because the per-segment loops call it for
// every one of 10,000 tiny tensors.
inline constexpr size_t FloatSize(DataType t) {
  return t == DataType::kFloat64 ? 8 : t == DataType::kFloat32 ? 4 : 2;
}

struct TensorRef {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
};

// dst[k] = convert(dst_t, scale * src[k]) for k < count (+ old dst[k] when the
// job accumulates). src == nullptr means "write zeros" (chunk-cat padding).
struct Segment {
  const void* src = nullptr;
  DataType src_t = DataType::kFloat32;
  void* dst = nullptr;
  DataType dst_t = DataType::kFloat32;
  size_t count = 0;
};

// The L2 norm's fixed blocking, which makes its result the same bits on every
// run, thread count and implementation (host and CUDA):
//   - each tensor is cut into blocks of kNormBlock consecutive elements (the
//     last one may be shorter);
//   - element e of a block goes to lane e % kNormLanes, and each lane sums
//     double(x) * double(x) in element order from +0.0 (the square of a
//     float32, float16 or bfloat16 is exact in double, so an FMA gives the same
//     bits as a multiply and an add);
//   - a block's lanes are combined as a tree: for w = kNormLanes/2 down to 1,
//     lane[l] += lane[l + w] for l < w; the block sum is lane[0];
//   - a tensor's sum adds its block sums in block order from +0.0, and the
//     total adds the tensors' sums in tensor order;
//   - norms[i] = float(sqrt(tensor sum)), total = float(sqrt(total sum)).
inline constexpr size_t kNormLanes = 256;
inline constexpr size_t kNormBlock = 64 * kNormLanes;

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_TYPES_H_
