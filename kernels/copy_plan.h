// A copy-like kernel (flatten, unflatten, chunk-cat, chunk-split) checked
// once for a fixed tensor list and then run many times: the reuse NCCL makes
// of its plans and apex's multi_tensor_apply makes of its chunk tables, for
// the bucket fills and copy-outs a training step repeats on the same buffers.
//
// Creating a plan does every check the one-shot entry point does
// (kernels/kernels.h: dtypes, NULL and misaligned pointers, offsets and chunk
// sizes, overlap, one memory kind) and, for host memory, cuts the segments
// into thread-pool tasks. Run() checks only its stream and converts: it
// allocates nothing and validates nothing per tensor, so a flatten of 10,000
// tiny tensors costs no more than one memcpy per tensor (docs/performance.md).
//
//   ASSIGN_OR_RETURN(kernels::CopyPlan fill,
//                    kernels::CopyPlan::Flatten(grads, bucket, DataType::kBfloat16, offsets));
//   for (;;) RETURN_IF_ERROR(fill.Run(1.0f / world, /*stream=*/nullptr));  // every step
//
// On CUDA memory, creation also builds the device kernels' launch table and
// uploads it to device memory (kernels/cuda/launch.h: cudaMalloc, cudaMemcpy,
// so create plans outside a graph capture). Run is then one kernel launch per
// (source, destination) type pair present, one for a list of one type, on the
// given cudaStream_t: no host-side building, no allocation, no
// synchronisation, so it can be captured in a CUDA graph.
//
// The buffers named at creation must stay allocated at the same addresses for
// as long as the plan runs; their contents may change freely. A plan is
// immutable after creation: any thread may Run it, on any stream, concurrently
// too (if the destinations allow), and copies of a plan share its prepared
// state. Run on a host stream keeps that state alive until the work has run,
// so the plan itself may be destroyed right after enqueuing. On CUDA memory
// the last copy's destruction waits for the device (cudaDeviceSynchronize:
// every stream a run may still be queued on) before freeing the table, so
// that too is safe right after enqueuing; but it must not happen during a
// capture, nor while a CUDA graph that captured a Run may still be launched.
#ifndef WEFT_KERNELS_COPY_PLAN_H_
#define WEFT_KERNELS_COPY_PLAN_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "kernels/types.h"

namespace weft {
namespace kernels {

struct SegmentList;  // kernels/plan.h

class CopyPlan {
 public:
  // An empty plan: Run does nothing.
  CopyPlan() = default;

  // The layouts and arguments of kernels/kernels.h's Flatten, Unflatten,
  // ChunkCat and ChunkSplit, less scale and stream (given to each Run);
  // `accumulate` is part of the copy-out plans.
  static absl::StatusOr<CopyPlan> Flatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t,
                                          const size_t* offsets);
  static absl::StatusOr<CopyPlan> Unflatten(const void* src, DataType src_t, const size_t* offsets,
                                            absl::Span<const TensorRef> dsts, bool accumulate);
  static absl::StatusOr<CopyPlan> ChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts,
                                           void* dst, DataType dst_t);
  static absl::StatusOr<CopyPlan> ChunkSplit(const void* src, DataType src_t, int world,
                                             const size_t* chunk_counts, absl::Span<const TensorRef> dsts,
                                             bool accumulate);

  // Runs the copy with this scale, bit for bit what the one-shot call with
  // the same arguments writes. `stream` as in kernels/kernels.h: host memory
  // takes nullptr (synchronous) or a HostStream*, CUDA memory a cudaStream_t.
  absl::Status Run(float scale, void* stream) const;

  // Elements copied (or zero-filled) per run.
  size_t elements() const;
  // Where the buffers are (kHost for an empty plan).
  MemKind memory() const;

 private:
  struct State;
  explicit CopyPlan(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  static absl::StatusOr<CopyPlan> Make(const char* kernel, const absl::Status& listed, SegmentList& list,
                                       bool accumulate);

  std::shared_ptr<const State> state_;
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_COPY_PLAN_H_
