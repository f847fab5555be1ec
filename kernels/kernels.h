// The fused multi-tensor kernels, as the rest of weft calls them.
//
// These entry points check their arguments, find which memory the pointers
// are in, and dispatch: host memory to the vectorised host versions
// (kernels/cpu), CUDA memory to the CUDA versions (kernels/cuda, when built).
// kernels/reference holds the plain specification both are tested against.
// The C ABI (weftFlatten & co.) is a thin wrapper over these.
//
//   std::vector<TensorRef> grads = ...;
//   RETURN_IF_ERROR(kernels::Flatten(grads, bucket, DataType::kBfloat16,
//                                    /*offsets=*/nullptr, 1.0f / world, /*stream=*/nullptr));
#ifndef WEFT_KERNELS_KERNELS_H_
#define WEFT_KERNELS_KERNELS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/dtype.h"

namespace weft {
namespace kernels {

struct TensorRef {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
};

// dst[offsets[i] + j] = convert(dst_t, scale * srcs[i][j]); offsets == nullptr packs back to back.
// `stream`: host memory: nullptr (synchronous) or a HostStream*; CUDA memory: a cudaStream_t.
absl::Status Flatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, const size_t* offsets,
                     float scale, void* stream);

// dsts[i][j] = convert(dsts[i].dtype, scale * src[offsets[i] + j]) (+= old value when accumulate).
absl::Status Unflatten(const void* src, DataType src_t, const size_t* offsets, absl::Span<const TensorRef> dsts,
                       float scale, bool accumulate, void* stream);

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_KERNELS_H_
