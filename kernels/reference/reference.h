// The specification of every kernel, as plain loops over elements: the
// version every other one (kernels/cpu, kernels/cuda) is tested against, bit
// for bit. No argument checks (kernels/kernels.cc does those) and no speed.
//
//   reference::Flatten(srcs, expected.data(), DataType::kBfloat16, nullptr, 0.25f);
//   // compare with what kernels::Flatten wrote
#ifndef WEFT_KERNELS_REFERENCE_REFERENCE_H_
#define WEFT_KERNELS_REFERENCE_REFERENCE_H_

#include <cstddef>

#include "absl/types/span.h"
#include "kernels/types.h"

namespace weft {
namespace kernels {
namespace reference {

// Semantics of each as in kernels/kernels.h.
void Flatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, const size_t* offsets, float scale);
void Unflatten(const void* src, DataType src_t, const size_t* offsets, absl::Span<const TensorRef> dsts,
               float scale, bool accumulate);
void ChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts, void* dst, DataType dst_t,
              float scale);
void ChunkSplit(const void* src, DataType src_t, int world, const size_t* chunk_counts,
                absl::Span<const TensorRef> dsts, float scale, bool accumulate);
void UnscaleCheckFinite(absl::Span<const TensorRef> tensors, float inv_scale, int* found_inf);
void L2Norm(absl::Span<const TensorRef> tensors, float* norms, float* total);

// chunk_counts ? chunk_counts[i] : ceil(count / world): FSDP2's chunk of tensor i.
size_t ChunkOf(const size_t* chunk_counts, size_t i, size_t count, int world);

}  // namespace reference
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_REFERENCE_REFERENCE_H_
