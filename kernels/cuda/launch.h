// The CUDA multi-tensor kernels, as plain launchers (no Abseil: this header is
// included by .cu files). kernels/cuda/kernels.cc wraps them into
// absl::Status for the dispatch in kernels/.
//
// Every pointer is device memory of the current device and every launcher
// only enqueues work on `stream`: no synchronisation and no host-visible
// result, so all of them can be captured in a CUDA graph. L2Norm is the only
// one that needs scratch memory; it takes it stream-ordered
// (cudaMallocAsync/cudaFreeAsync), which graph capture records as
// allocation nodes.
//
// Arithmetic is the host reference's, bit for bit: the product is formed in
// float (double when either side is float64), an accumulation adds the old
// value in the same type, and the result is rounded once to the destination
// type with round-to-nearest-even (cvt.rn; fused multiply-add is never
// formed). NaN results are NaN, but their sign and payload are the GPU's
// canonical ones, not the input's.
//
//   const Tensor grads[] = {{g0, n0, DataType::kFloat32}, {g1, n1, DataType::kFloat32}};
//   cudaError_t e = LaunchFlatten(grads, 2, bucket, DataType::kBfloat16, nullptr, 1.0f / world, stream);
#ifndef WEFT_KERNELS_CUDA_LAUNCH_H_
#define WEFT_KERNELS_CUDA_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"

namespace weft {
namespace kernels {
namespace cuda {

// Same members, in the same order, as kernels::TensorRef (checked in kernels.cc).
struct Tensor {
  void* data;
  size_t count;
  DataType dtype;
};

// The reduce-scatter layout of FSDP2's chunk_cat: the output holds `world`
// slabs of `slab_elems` elements; tensor i is cut into `world` chunks of
// chunk_elems[i] elements and chunk r goes to slab r at slab_offsets[i],
// zero-padded past the tensor's end. chunk_elems == nullptr: ceil(count /
// world); slab_offsets == nullptr: the chunks packed in tensor order;
// slab_elems == 0: the sum of the chunk sizes. The caller checks that
// chunk_elems[i] * world >= count and that each chunk fits in its slab.
struct ChunkLayout {
  int world = 1;
  const size_t* chunk_elems = nullptr;
  const size_t* slab_offsets = nullptr;
  size_t slab_elems = 0;
};

// Float types only (float32, float16, bfloat16, float64); anything else is
// cudaErrorInvalidValue. n == 0 launches nothing (L2Norm still writes 0).

// dst[offsets[i] + j] = convert(dst_t, scale * srcs[i][j]); offsets == nullptr: back to back.
cudaError_t LaunchFlatten(const Tensor* srcs, int n, void* dst, DataType dst_t, const size_t* offsets, float scale,
                          cudaStream_t stream);

// dsts[i][j] = convert(dsts[i].dtype, scale * src[offsets[i] + j] (+ dsts[i][j] when accumulate)).
cudaError_t LaunchUnflatten(const void* src, DataType src_t, const size_t* offsets, const Tensor* dsts, int n,
                            float scale, bool accumulate, cudaStream_t stream);

// Every element *= inv_scale in place; *found_inf (device) = 1 if any result is inf or NaN, else untouched.
cudaError_t LaunchUnscaleCheckFinite(const Tensor* tensors, int n, float inv_scale, int* found_inf,
                                     cudaStream_t stream);

// norms[i] (device, may be nullptr) = ||tensors[i]||_2, *total (device, may be nullptr) = the norm of all.
// Sums of squares are accumulated in double in a fixed order that depends only
// on the tensor sizes (not on the grid or the device): the same bits every run.
cudaError_t LaunchL2Norm(const Tensor* tensors, int n, float* norms, float* total, cudaStream_t stream);

// chunk_cat: srcs into `dst` (dst_t) laid out by `layout`, times scale.
cudaError_t LaunchChunkCat(const Tensor* srcs, int n, const ChunkLayout& layout, void* dst, DataType dst_t,
                           float scale, cudaStream_t stream);

// Its inverse: the all-gathered slabs `src` (src_t) back into the full tensors `dsts`.
cudaError_t LaunchChunkSplit(const void* src, DataType src_t, const ChunkLayout& layout, const Tensor* dsts, int n,
                             cudaStream_t stream);

}  // namespace cuda
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_CUDA_LAUNCH_H_
