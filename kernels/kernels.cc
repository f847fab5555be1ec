// Checks, memory-kind detection and dispatch for kernels/kernels.h.
#include "kernels/kernels.h"

#include <vector>

#include "core/status.h"
#include "kernels/check.h"
#include "kernels/cpu/cpu.h"
#include "kernels/device.h"
#include "kernels/dispatch.h"
#include "kernels/plan.h"

namespace weft {
namespace kernels {
namespace {

// `list` is this thread's scratch (see Plan*): consumed before returning.
absl::Status RunCopy(const char* kernel, const absl::Status& planned, SegmentList& list, float scale,
                     bool accumulate, void* stream, std::optional<MemKind> memory) {
  if (!planned.ok()) return Annotate(planned, kernel);
  if (list.total == 0) return absl::OkStatus();
  absl::StatusOr<MemKind> kind = CheckSegments(list, memory);
  if (!kind.ok()) return Annotate(kind.status(), kernel);
  if (*kind == MemKind::kCuda) {
    ASSIGN_OR_RETURN(const DeviceKernels* dk, DeviceFor(kernel, stream));
    return DeviceResult(kernel, dk, dk->copy(list.segments.data(), list.segments.size(), scale, accumulate, stream));
  }
  if (stream == nullptr) {
    cpu::Copy(list.segments, scale, accumulate);
    return absl::OkStatus();
  }
  return RunOnHost(kernel, stream, [segments = list.segments, scale, accumulate] {
    cpu::Copy(segments, scale, accumulate);
  });
}

// Reused by every copy on this thread, so that planning allocates nothing in steady state.
SegmentList& ThreadList() {
  thread_local SegmentList list;
  return list;
}

// Checks the tensors of unscale and norm and adds them to the overlap and memory checks.
absl::Status MathTensors(absl::Span<const TensorRef> tensors, OverlapCheck& overlap, MemoryCheck& memory,
                         bool written) {
  RETURN_IF_ERROR(CheckTensors("tensors", tensors, /*allow_float64=*/false));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t bytes = tensors[i].count * ElementSize(tensors[i].dtype);
    if (written) {
      overlap.Write("tensors", static_cast<long>(i), tensors[i].data, bytes);
    } else {
      overlap.Read("tensors", static_cast<long>(i), tensors[i].data, bytes);
    }
    if (tensors[i].count > 0) memory.Add("tensors", static_cast<long>(i), tensors[i].data);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Flatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, const size_t* offsets,
                     float scale, void* stream, std::optional<MemKind> memory) {
  SegmentList& list = ThreadList();
  return RunCopy("flatten", PlanFlatten(srcs, dst, dst_t, offsets, list), list, scale, false, stream, memory);
}

absl::Status Unflatten(const void* src, DataType src_t, const size_t* offsets, absl::Span<const TensorRef> dsts,
                       float scale, bool accumulate, void* stream, std::optional<MemKind> memory) {
  SegmentList& list = ThreadList();
  return RunCopy("unflatten", PlanUnflatten(src, src_t, offsets, dsts, list), list, scale, accumulate, stream,
                 memory);
}

absl::Status ChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts, void* dst,
                      DataType dst_t, float scale, void* stream, std::optional<MemKind> memory) {
  SegmentList& list = ThreadList();
  return RunCopy("chunk_cat", PlanChunkCat(srcs, world, chunk_counts, dst, dst_t, list), list, scale, false, stream,
                 memory);
}

absl::Status ChunkSplit(const void* src, DataType src_t, int world, const size_t* chunk_counts,
                        absl::Span<const TensorRef> dsts, float scale, bool accumulate, void* stream,
                        std::optional<MemKind> memory) {
  SegmentList& list = ThreadList();
  return RunCopy("chunk_split", PlanChunkSplit(src, src_t, world, chunk_counts, dsts, list), list, scale,
                 accumulate, stream, memory);
}

absl::Status UnscaleCheckFinite(absl::Span<const TensorRef> tensors, float inv_scale, int* found_inf,
                                void* stream, std::optional<MemKind> stated) {
  constexpr const char* kKernel = "unscale_check_finite";
  if (found_inf == nullptr) return InvalidArgument("%s: found_inf is NULL", kKernel);
  OverlapCheck overlap;
  MemoryCheck memory(stated);
  RETURN_IF_ERROR(Annotate(MathTensors(tensors, overlap, memory, /*written=*/true), kKernel));
  overlap.Write("found_inf", -1, found_inf, sizeof(int));
  RETURN_IF_ERROR(Annotate(overlap.Check(), kKernel));
  memory.Add("found_inf", -1, found_inf);
  absl::StatusOr<MemKind> kind = memory.Kind();
  if (!kind.ok()) return Annotate(kind.status(), kKernel);
  if (*kind == MemKind::kCuda) {
    ASSIGN_OR_RETURN(const DeviceKernels* dk, DeviceFor(kKernel, stream));
    return DeviceResult(kKernel, dk, dk->unscale(tensors.data(), tensors.size(), inv_scale, found_inf, stream));
  }
  if (stream == nullptr) {
    cpu::UnscaleCheckFinite(tensors, inv_scale, found_inf);
    return absl::OkStatus();
  }
  return RunOnHost(kKernel, stream,
                   [list = std::vector<TensorRef>(tensors.begin(), tensors.end()), inv_scale, found_inf] {
                     cpu::UnscaleCheckFinite(list, inv_scale, found_inf);
                   });
}

absl::Status L2Norm(absl::Span<const TensorRef> tensors, float* norms, float* total, void* stream,
                    std::optional<MemKind> stated) {
  constexpr const char* kKernel = "l2_norm";
  if (total == nullptr) return InvalidArgument("%s: total is NULL", kKernel);
  OverlapCheck overlap;
  MemoryCheck memory(stated);
  RETURN_IF_ERROR(Annotate(MathTensors(tensors, overlap, memory, /*written=*/false), kKernel));
  overlap.Write("norms", -1, norms, tensors.size() * sizeof(float));
  overlap.Write("total", -1, total, sizeof(float));
  RETURN_IF_ERROR(Annotate(overlap.Check(), kKernel));
  memory.Add("norms", -1, tensors.empty() ? nullptr : norms);
  memory.Add("total", -1, total);
  absl::StatusOr<MemKind> kind = memory.Kind();
  if (!kind.ok()) return Annotate(kind.status(), kKernel);
  if (*kind == MemKind::kCuda) {
    ASSIGN_OR_RETURN(const DeviceKernels* dk, DeviceFor(kKernel, stream));
    return DeviceResult(kKernel, dk, dk->l2norm(tensors.data(), tensors.size(), norms, total, stream));
  }
  if (stream == nullptr) {
    cpu::L2Norm(tensors, norms, total);
    return absl::OkStatus();
  }
  return RunOnHost(kKernel, stream, [list = std::vector<TensorRef>(tensors.begin(), tensors.end()), norms, total] {
    cpu::L2Norm(list, norms, total);
  });
}

}  // namespace kernels
}  // namespace weft
