#include "kernels/copy_plan.h"

#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/check.h"
#include "kernels/cpu/cpu.h"
#include "kernels/dispatch.h"
#include "kernels/plan.h"

namespace weft {
namespace kernels {

// Everything a run needs, fixed at creation. Host plans keep the prepared
// pieces and tasks; device plans keep the segments the device hook takes.
struct CopyPlan::State {
  const char* kernel = "";
  bool accumulate = false;
  MemKind memory = MemKind::kHost;
  size_t elements = 0;
  cpu::PreparedCopy host;
  std::vector<Segment> device;
};

absl::StatusOr<CopyPlan> CopyPlan::Make(const char* kernel, const absl::Status& listed, SegmentList& list,
                                         bool accumulate) {
  if (!listed.ok()) return Annotate(listed, kernel);
  auto state = std::make_shared<State>();
  state->kernel = kernel;
  state->accumulate = accumulate;
  state->elements = list.total;
  if (list.total == 0) return CopyPlan(std::move(state));
  absl::StatusOr<MemKind> memory = CheckSegments(list);
  if (!memory.ok()) return Annotate(memory.status(), kernel);
  state->memory = *memory;
  if (*memory == MemKind::kCuda) {
    // Refused now rather than at every run when this build has no device kernels.
    RETURN_IF_ERROR(DeviceFor(kernel, nullptr).status());
    state->device = std::move(list.segments);
  } else {
    cpu::Prepare(list.segments, state->host);
  }
  return CopyPlan(std::move(state));
}

absl::StatusOr<CopyPlan> CopyPlan::Flatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t,
                                           const size_t* offsets) {
  SegmentList list;
  return Make("flatten plan", PlanFlatten(srcs, dst, dst_t, offsets, list), list, false);
}

absl::StatusOr<CopyPlan> CopyPlan::Unflatten(const void* src, DataType src_t, const size_t* offsets,
                                             absl::Span<const TensorRef> dsts, bool accumulate) {
  SegmentList list;
  return Make("unflatten plan", PlanUnflatten(src, src_t, offsets, dsts, list), list, accumulate);
}

absl::StatusOr<CopyPlan> CopyPlan::ChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts,
                                            void* dst, DataType dst_t) {
  SegmentList list;
  return Make("chunk_cat plan", PlanChunkCat(srcs, world, chunk_counts, dst, dst_t, list), list, false);
}

absl::StatusOr<CopyPlan> CopyPlan::ChunkSplit(const void* src, DataType src_t, int world,
                                              const size_t* chunk_counts, absl::Span<const TensorRef> dsts,
                                              bool accumulate) {
  SegmentList list;
  return Make("chunk_split plan", PlanChunkSplit(src, src_t, world, chunk_counts, dsts, list), list, accumulate);
}

absl::Status CopyPlan::Run(float scale, void* stream) const {
  if (state_ == nullptr || state_->elements == 0) return absl::OkStatus();
  const State& s = *state_;
  if (s.memory == MemKind::kCuda) {
    ASSIGN_OR_RETURN(const DeviceKernels* dk, DeviceFor(s.kernel, stream));
    return DeviceResult(s.kernel, dk, dk->copy(s.device.data(), s.device.size(), scale, s.accumulate, stream));
  }
  if (stream == nullptr) {
    cpu::Run(s.host, scale, s.accumulate);
    return absl::OkStatus();
  }
  return RunOnHost(s.kernel, stream, [state = state_, scale] { cpu::Run(state->host, scale, state->accumulate); });
}

size_t CopyPlan::elements() const { return state_ == nullptr ? 0 : state_->elements; }

MemKind CopyPlan::memory() const { return state_ == nullptr ? MemKind::kHost : state_->memory; }

}  // namespace kernels
}  // namespace weft
