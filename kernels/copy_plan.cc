#include "kernels/copy_plan.h"

#include <utility>

#include "core/status.h"
#include "kernels/check.h"
#include "kernels/cpu/cpu.h"
#include "kernels/dispatch.h"
#include "kernels/plan.h"

namespace weft {
namespace kernels {

// Everything a run needs, fixed at creation. Host plans keep the prepared
// pieces and tasks; device plans keep the device implementation's plan (its
// launch table already in device memory), freed with the last copy of this plan.
struct CopyPlan::State {
  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    // A failure here can only be an earlier asynchronous error, which the
    // caller's next synchronisation of a stream reports; nothing to do with it here.
    if (device != nullptr) (void)dk->plan_destroy(device);
  }

  const char* kernel = "";
  bool accumulate = false;
  MemKind memory = MemKind::kHost;
  size_t elements = 0;
  cpu::PreparedCopy host;
  const DeviceKernels* dk = nullptr;
  void* device = nullptr;
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
    ASSIGN_OR_RETURN(state->dk, DeviceFor(kernel, nullptr));
    RETURN_IF_ERROR(DeviceResult(kernel, state->dk,
                                 state->dk->plan_create(list.segments.data(), list.segments.size(), accumulate,
                                                        &state->device)));
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
    RETURN_IF_ERROR(DeviceFor(s.kernel, stream).status());
    return DeviceResult(s.kernel, s.dk, s.dk->plan_run(s.device, scale, stream));
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
