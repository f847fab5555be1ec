// The fused multi-tensor kernels, as the rest of weft calls them.
//
// These entry points check their arguments, find which memory the pointers
// are in, and dispatch: host memory to the vectorised host versions
// (kernels/cpu), CUDA memory to the device versions registered through
// kernels/device.h (kernels/cuda, when built). kernels/reference holds the
// plain specification both are tested against. The C ABI (weftFlatten & co.)
// is a thin wrapper over these.
//
//   std::vector<TensorRef> grads = ...;
//   RETURN_IF_ERROR(kernels::Flatten(grads, bucket, DataType::kBfloat16,
//                                    /*offsets=*/nullptr, 1.0f / world, /*stream=*/nullptr));
//
// Each call lists and checks its tensors anew (about 30 ns a tensor on the
// host). A copy repeated on the same buffers every step can be checked once
// instead: kernels/copy_plan.h.
//
// Arithmetic, for every kernel: the product is computed in float32 (float64
// when either side is float64) and rounded once to the destination type,
// round-to-nearest-even, so float32 results match PyTorch's
// .to(torch.bfloat16) / .to(torch.float16) bit for bit; NaN stays NaN,
// overflow becomes inf, subnormals are kept. Which NaN (sign, payload) is
// unspecified: it depends on operand order, which compilers and GPUs choose
// freely (torch itself differs between its scalar and vector paths). When
// accumulating, the old value is added to the product in the same type
// before the one rounding. A same-type copy with scale 1 (and no
// accumulation) moves the bits unchanged. float64 sources are rounded once
// (torch's float64 -> bfloat16 goes through float32 and may round twice).
// dtypes: float32, float16, bfloat16, float64 in any pair for the copies;
// float32, float16, bfloat16 for unscale and norm.
//
// Memory: all pointers of a call must be host memory or all CUDA memory
// (managed memory counts as either; a call whose pointers are all managed
// runs on the device). `stream`: host memory: nullptr (synchronous) or a
// HostStream* (enqueued; buffers must stay valid until it is synchronised);
// CUDA memory: a cudaStream_t, and found_inf, norms and total are device
// pointers. `memory`: the kind the caller states (weftFlattenEx & co.), so
// that no pointer is classified; nullopt finds it from the pointers. Errors
// name the offending argument and its value.
#ifndef WEFT_KERNELS_KERNELS_H_
#define WEFT_KERNELS_KERNELS_H_

#include <cstddef>
#include <optional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "kernels/types.h"

namespace weft {
namespace kernels {

// dst[offsets[i] + j] = convert(dst_t, scale * srcs[i][j]); offsets == nullptr packs back to back.
// `stream`: host memory: nullptr (synchronous) or a HostStream*; CUDA memory: a cudaStream_t.
absl::Status Flatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, const size_t* offsets,
                     float scale, void* stream, std::optional<MemKind> memory = std::nullopt);

// dsts[i][j] = convert(dsts[i].dtype, scale * src[offsets[i] + j]) (+= old value when accumulate).
absl::Status Unflatten(const void* src, DataType src_t, const size_t* offsets, absl::Span<const TensorRef> dsts,
                       float scale, bool accumulate, void* stream, std::optional<MemKind> memory = std::nullopt);

// FSDP2's chunk_cat, the input of a reduce-scatter: rank r's slab holds chunk
// r of every tensor, consecutively, zero-padded. With
//   chunk[i] = chunk_counts ? chunk_counts[i] : ceil(srcs[i].count / world),
//   base[i] = chunk[0] + ... + chunk[i-1],  S = base[n] (the slab length),
// dst[r * S + base[i] + k] = convert(dst_t, scale * srcs[i][r * chunk[i] + k])
// where r * chunk[i] + k < srcs[i].count, and +0 elsewhere (k < chunk[i]).
// chunk_counts[i] * world must cover srcs[i].count.
absl::Status ChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts, void* dst,
                      DataType dst_t, float scale, void* stream, std::optional<MemKind> memory = std::nullopt);

// The inverse, the copy-out of an all-gather of such slabs into full tensors:
// dsts[i][r * chunk[i] + k] = convert(dsts[i].dtype, scale * src[r * S + base[i] + k])
// (+= old value when accumulate) for every element of dsts[i]; padding is not read.
absl::Status ChunkSplit(const void* src, DataType src_t, int world, const size_t* chunk_counts,
                        absl::Span<const TensorRef> dsts, float scale, bool accumulate, void* stream,
                        std::optional<MemKind> memory = std::nullopt);

// Every element = convert(t, x * inv_scale) in place (in float32); *found_inf
// = 1 if any result is inf or NaN, left unchanged otherwise (so several calls
// can share one flag, as torch's GradScaler does).
absl::Status UnscaleCheckFinite(absl::Span<const TensorRef> tensors, float inv_scale, int* found_inf,
                                void* stream, std::optional<MemKind> memory = std::nullopt);

// L2 norm of each tensor (into norms[i]; norms may be nullptr) and of all of
// them together (*total), accumulated in float64 with the fixed blocking of
// kernels/types.h: the same bits on every run and thread count.
absl::Status L2Norm(absl::Span<const TensorRef> tensors, float* norms, float* total, void* stream,
                    std::optional<MemKind> memory = std::nullopt);

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_KERNELS_H_
