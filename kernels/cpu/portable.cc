// The portable pieces: the reference element by element, plus the cases the
// compiler vectorises on its own (plain copies, zero fills, float32 math).
#include <cmath>
#include <cstring>

#include "kernels/cpu/isa.h"
#include "kernels/reference/convert.h"

namespace weft {
namespace kernels {
namespace cpu {
namespace {

using reference::ConvertElement;
using reference::IsBitCopy;
using reference::LoadFloat;
using reference::StoreFloat;

void Convert(const void* src, DataType src_t, void* dst, DataType dst_t, size_t n, float scale, bool accumulate,
             bool /*stream: memcpy and memset choose for themselves*/) {
  if (src == nullptr) {
    std::memset(dst, 0, n * ElementSize(dst_t));
    return;
  }
  if (IsBitCopy(src_t, dst_t, scale, accumulate)) {
    std::memcpy(dst, src, n * ElementSize(src_t));
    return;
  }
  if (src_t == DataType::kFloat32 && dst_t == DataType::kFloat32) {
    const float* s = static_cast<const float*>(src);
    float* d = static_cast<float*>(dst);
    if (accumulate) {
      for (size_t k = 0; k < n; ++k) d[k] = d[k] + s[k] * scale;
    } else {
      for (size_t k = 0; k < n; ++k) d[k] = s[k] * scale;
    }
    return;
  }
  for (size_t k = 0; k < n; ++k) ConvertElement(src, k, src_t, dst, k, dst_t, scale, accumulate);
}

bool Unscale(void* x, DataType t, size_t n, float inv_scale) {
  bool found = false;
  for (size_t k = 0; k < n; ++k) {
    StoreFloat(x, k, t, LoadFloat(x, k, t) * inv_scale);
    found |= !std::isfinite(LoadFloat(x, k, t));
  }
  return found;
}

double BlockSumOfSquares(const void* x, DataType t, size_t n) {
  double lane[kNormLanes] = {};
  for (size_t k = 0; k < n; ++k) {
    const double v = LoadFloat(x, k, t);
    lane[k % kNormLanes] += v * v;
  }
  for (size_t w = kNormLanes / 2; w >= 1; w /= 2) {
    for (size_t l = 0; l < w; ++l) lane[l] += lane[l + w];
  }
  return lane[0];
}

// The element loop above is the whole portable set: nothing to resolve ahead.
RunFn Pick(DataType, DataType, bool, bool) { return nullptr; }

void CopyBits(const Segment* segments, size_t n, size_t size) {
  for (size_t i = 0; i < n; ++i) {
    const Segment& s = segments[i];
    if (s.src != nullptr) {
      std::memcpy(s.dst, s.src, s.count * size);
    } else {
      std::memset(s.dst, 0, s.count * size);
    }
  }
}

}  // namespace

const Isa& PortableIsa() {
  static const Isa isa{"portable", Convert, Unscale, BlockSumOfSquares, Pick, CopyBits};
  return isa;
}

}  // namespace cpu
}  // namespace kernels
}  // namespace weft
