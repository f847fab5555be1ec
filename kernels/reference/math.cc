// Reference unscale and L2 norm: the element loops and the norm's fixed
// blocking (kernels/types.h) spelled out one step at a time.
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/reference/convert.h"
#include "kernels/reference/reference.h"

namespace weft {
namespace kernels {
namespace reference {

void UnscaleCheckFinite(absl::Span<const TensorRef> tensors, float inv_scale, int* found_inf) {
  for (const TensorRef& t : tensors) {
    for (size_t j = 0; j < t.count; ++j) {
      StoreFloat(t.data, j, t.dtype, LoadFloat(t.data, j, t.dtype) * inv_scale);
      if (!std::isfinite(LoadFloat(t.data, j, t.dtype))) *found_inf = 1;
    }
  }
}

namespace {

double BlockSumOfSquares(const TensorRef& t, size_t begin, size_t end) {
  std::vector<double> lane(kNormLanes, 0.0);
  for (size_t j = begin; j < end; ++j) {
    const double x = LoadFloat(t.data, j, t.dtype);
    lane[(j - begin) % kNormLanes] += x * x;
  }
  for (size_t w = kNormLanes / 2; w >= 1; w /= 2) {
    for (size_t l = 0; l < w; ++l) lane[l] += lane[l + w];
  }
  return lane[0];
}

}  // namespace

void L2Norm(absl::Span<const TensorRef> tensors, float* norms, float* total) {
  double all = 0.0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    double sum = 0.0;
    for (size_t b = 0; b < tensors[i].count; b += kNormBlock) {
      const size_t end = b + kNormBlock < tensors[i].count ? b + kNormBlock : tensors[i].count;
      sum += BlockSumOfSquares(tensors[i], b, end);
    }
    if (norms != nullptr) norms[i] = static_cast<float>(std::sqrt(sum));
    all += sum;
  }
  *total = static_cast<float>(std::sqrt(all));
}

}  // namespace reference
}  // namespace kernels
}  // namespace weft
