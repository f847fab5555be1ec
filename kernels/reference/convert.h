// One element of every copy-like kernel, written out plainly: the scalar
// specification (kernels/kernels.h "Arithmetic") that the reference kernels
// loop over and the vectorised versions use for what they do not vectorise.
//
//   ConvertElement(src, i, DataType::kFloat32, dst, j, DataType::kBfloat16, 0.5f, /*accumulate=*/false);
#ifndef WEFT_KERNELS_REFERENCE_CONVERT_H_
#define WEFT_KERNELS_REFERENCE_CONVERT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace weft {
namespace kernels {
namespace reference {

// float64 when either side is float64, float32 otherwise.
inline bool ComputesInDouble(DataType a, DataType b) { return a == DataType::kFloat64 || b == DataType::kFloat64; }

// Exact widening of element i. Only the four floating types reach here.
inline float LoadFloat(const void* base, size_t i, DataType t) {
  switch (t) {
    case DataType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBfloat16: return Bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}
inline double LoadDouble(const void* base, size_t i, DataType t) {
  if (t == DataType::kFloat64) return static_cast<const double*>(base)[i];
  return LoadFloat(base, i, t);
}

// One rounding, to nearest even.
inline void StoreFloat(void* base, size_t i, DataType t, float v) {
  switch (t) {
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = FloatToHalf(v); break;
    case DataType::kBfloat16: static_cast<uint16_t*>(base)[i] = FloatToBf16(v); break;
    default: static_cast<float*>(base)[i] = v; break;
  }
}
inline void StoreDouble(void* base, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = DoubleToHalf(v); break;
    case DataType::kBfloat16: static_cast<uint16_t*>(base)[i] = DoubleToBf16(v); break;
    case DataType::kFloat64: static_cast<double*>(base)[i] = v; break;
    default: static_cast<float*>(base)[i] = static_cast<float>(v); break;
  }
}

// True when the copy moves bits unchanged: same type, scale 1, no accumulation.
inline bool IsBitCopy(DataType src_t, DataType dst_t, float scale, bool accumulate) {
  return src_t == dst_t && scale == 1.0f && !accumulate;
}

// dst[j] = convert(dst_t, scale * src[i]) (+ old dst[j] when accumulate).
// src == nullptr stands for a zero source element (chunk-cat padding).
inline void ConvertElement(const void* src, size_t i, DataType src_t, void* dst, size_t j, DataType dst_t,
                           float scale, bool accumulate) {
  if (src == nullptr) {
    std::memset(static_cast<char*>(dst) + j * ElementSize(dst_t), 0, ElementSize(dst_t));
    return;
  }
  if (IsBitCopy(src_t, dst_t, scale, accumulate)) {
    const size_t size = ElementSize(src_t);
    std::memcpy(static_cast<char*>(dst) + j * size, static_cast<const char*>(src) + i * size, size);
    return;
  }
  if (ComputesInDouble(src_t, dst_t)) {
    double v = LoadDouble(src, i, src_t) * static_cast<double>(scale);
    if (accumulate) v = LoadDouble(dst, j, dst_t) + v;
    StoreDouble(dst, j, dst_t, v);
  } else {
    float v = LoadFloat(src, i, src_t) * scale;
    if (accumulate) v = LoadFloat(dst, j, dst_t) + v;
    StoreFloat(dst, j, dst_t, v);
  }
}

}  // namespace reference
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_REFERENCE_CONVERT_H_
