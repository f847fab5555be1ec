// Kernel entry points and copy plans: check the list arguments, then
// kernels/kernels.cc (kernels/copy_plan.cc) checks the rest, so C++ callers
// get the same errors.
#include <optional>
#include <utility>
#include <vector>

#include "capi/export.h"
#include "capi/handles.h"
#include "capi/result.h"
#include "core/status.h"
#include "kernels/copy_plan.h"
#include "kernels/kernels.h"

struct weftCopyPlan {
  weft::kernels::CopyPlan impl;
};

using weft::capi::Guard;
using weft::capi::Live;
using weft::kernels::CopyPlan;
using weft::kernels::TensorRef;

namespace {

// Read as an int: the kernels check the value.
using weft::capi::DataTypeOf;

// The n tensors at `list` as TensorRefs; `what` names the argument in errors.
absl::StatusOr<std::vector<TensorRef>> Tensors(const char* what, const weftTensor_t* list, int n) {
  if (n < 0) return weft::InvalidArgument("n = %d is negative", n);
  if (list == nullptr && n > 0) return weft::InvalidArgument("%s is NULL with n = %d", what, n);
  std::vector<TensorRef> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[i] = {list[i].data, list[i].count, DataTypeOf(list[i].dtype)};
  return out;
}

absl::Status NewPlan(absl::StatusOr<CopyPlan> made, weftCopyPlan_t* plan) {
  if (!made.ok()) return made.status();
  auto* h = new weftCopyPlan{*std::move(made)};
  Live<weftCopyPlan>::Add(h);
  *plan = h;
  return absl::OkStatus();
}

// config->memory as the kernels take it: nullopt finds the kind from the pointers.
absl::StatusOr<std::optional<weft::MemKind>> Stated(const weftKernelConfig_t* config) {
  weftKernelConfig_t c = WEFT_KERNEL_CONFIG_INITIALIZER;
  if (config != nullptr) RETURN_IF_ERROR(weft::capi::ReadSized("config", config, &c));
  switch (c.memory) {
    case WEFT_MEMORY_AUTO: return std::nullopt;
    case weftMemoryHost: return weft::MemKind::kHost;
    case weftMemoryCuda: return weft::MemKind::kCuda;
  }
  return weft::InvalidArgument("config->memory = %d (expected WEFT_MEMORY_AUTO (-1), weftMemoryHost (0) or "
                               "weftMemoryCuda (1))", c.memory);
}

// The bodies of each kernel's two entry points: the one without a config is config NULL.
// Enums by reference (T reads them as ints): a copy would load a caller's
// out-of-range value as the enum type.
absl::Status FlattenCall(const weftTensor_t* srcs, int n, void* dst, const weftDataType_t& dst_dtype,
                         const size_t* offsets, float scale, const weftKernelConfig_t* config, void* stream) {
  ASSIGN_OR_RETURN(std::vector<TensorRef> s, Tensors("srcs", srcs, n));
  ASSIGN_OR_RETURN(const std::optional<weft::MemKind> memory, Stated(config));
  return weft::kernels::Flatten(s, dst, DataTypeOf(dst_dtype), offsets, scale, stream, memory);
}

absl::Status UnflattenCall(const void* src, const weftDataType_t& src_dtype, const size_t* offsets,
                           const weftTensor_t* dsts, int n, float scale, int accumulate,
                           const weftKernelConfig_t* config, void* stream) {
  ASSIGN_OR_RETURN(std::vector<TensorRef> d, Tensors("dsts", dsts, n));
  ASSIGN_OR_RETURN(const std::optional<weft::MemKind> memory, Stated(config));
  return weft::kernels::Unflatten(src, DataTypeOf(src_dtype), offsets, d, scale, accumulate != 0, stream, memory);
}

absl::Status UnscaleCall(const weftTensor_t* tensors, int n, float inv_scale, int* found_inf,
                         const weftKernelConfig_t* config, void* stream) {
  ASSIGN_OR_RETURN(std::vector<TensorRef> t, Tensors("tensors", tensors, n));
  ASSIGN_OR_RETURN(const std::optional<weft::MemKind> memory, Stated(config));
  return weft::kernels::UnscaleCheckFinite(t, inv_scale, found_inf, stream, memory);
}

absl::Status L2NormCall(const weftTensor_t* tensors, int n, float* norms, float* total,
                        const weftKernelConfig_t* config, void* stream) {
  ASSIGN_OR_RETURN(std::vector<TensorRef> t, Tensors("tensors", tensors, n));
  ASSIGN_OR_RETURN(const std::optional<weft::MemKind> memory, Stated(config));
  return weft::kernels::L2Norm(t, norms, total, stream, memory);
}

absl::Status ChunkCatCall(const weftTensor_t* srcs, int n, int world, const size_t* chunk_counts, void* dst,
                          const weftDataType_t& dst_dtype, float scale, const weftKernelConfig_t* config,
                          void* stream) {
  ASSIGN_OR_RETURN(std::vector<TensorRef> s, Tensors("srcs", srcs, n));
  ASSIGN_OR_RETURN(const std::optional<weft::MemKind> memory, Stated(config));
  return weft::kernels::ChunkCat(s, world, chunk_counts, dst, DataTypeOf(dst_dtype), scale, stream, memory);
}

absl::Status ChunkSplitCall(const void* src, const weftDataType_t& src_dtype, int world, const size_t* chunk_counts,
                            const weftTensor_t* dsts, int n, float scale, int accumulate,
                            const weftKernelConfig_t* config, void* stream) {
  ASSIGN_OR_RETURN(std::vector<TensorRef> d, Tensors("dsts", dsts, n));
  ASSIGN_OR_RETURN(const std::optional<weft::MemKind> memory, Stated(config));
  return weft::kernels::ChunkSplit(src, DataTypeOf(src_dtype), world, chunk_counts, d, scale, accumulate != 0, stream,
                                   memory);
}

}  // namespace

WEFT_API weftResult_t weftFlatten(const weftTensor_t* srcs, int n, void* dst, weftDataType_t dst_dtype,
                                  const size_t* offsets, float scale, void* stream) {
  return Guard("weftFlatten", [&] { return FlattenCall(srcs, n, dst, dst_dtype, offsets, scale, nullptr, stream); });
}

WEFT_API weftResult_t weftFlattenEx(const weftTensor_t* srcs, int n, void* dst, weftDataType_t dst_dtype,
                                    const size_t* offsets, float scale, const weftKernelConfig_t* config,
                                    void* stream) {
  return Guard("weftFlattenEx", [&] { return FlattenCall(srcs, n, dst, dst_dtype, offsets, scale, config, stream); });
}

WEFT_API weftResult_t weftUnflatten(const void* src, weftDataType_t src_dtype, const size_t* offsets,
                                    const weftTensor_t* dsts, int n, float scale, int accumulate, void* stream) {
  return Guard("weftUnflatten", [&] {
    return UnflattenCall(src, src_dtype, offsets, dsts, n, scale, accumulate, nullptr, stream);
  });
}

WEFT_API weftResult_t weftUnflattenEx(const void* src, weftDataType_t src_dtype, const size_t* offsets,
                                      const weftTensor_t* dsts, int n, float scale, int accumulate,
                                      const weftKernelConfig_t* config, void* stream) {
  return Guard("weftUnflattenEx", [&] {
    return UnflattenCall(src, src_dtype, offsets, dsts, n, scale, accumulate, config, stream);
  });
}

WEFT_API weftResult_t weftUnscaleCheckFinite(const weftTensor_t* tensors, int n, float inv_scale, int* found_inf,
                                             void* stream) {
  return Guard("weftUnscaleCheckFinite",
               [&] { return UnscaleCall(tensors, n, inv_scale, found_inf, nullptr, stream); });
}

WEFT_API weftResult_t weftUnscaleCheckFiniteEx(const weftTensor_t* tensors, int n, float inv_scale, int* found_inf,
                                               const weftKernelConfig_t* config, void* stream) {
  return Guard("weftUnscaleCheckFiniteEx",
               [&] { return UnscaleCall(tensors, n, inv_scale, found_inf, config, stream); });
}

WEFT_API weftResult_t weftL2Norm(const weftTensor_t* tensors, int n, float* norms, float* total, void* stream) {
  return Guard("weftL2Norm", [&] { return L2NormCall(tensors, n, norms, total, nullptr, stream); });
}

WEFT_API weftResult_t weftL2NormEx(const weftTensor_t* tensors, int n, float* norms, float* total,
                                   const weftKernelConfig_t* config, void* stream) {
  return Guard("weftL2NormEx", [&] { return L2NormCall(tensors, n, norms, total, config, stream); });
}

WEFT_API weftResult_t weftChunkCat(const weftTensor_t* srcs, int n, int world, const size_t* chunk_counts,
                                   void* dst, weftDataType_t dst_dtype, float scale, void* stream) {
  return Guard("weftChunkCat", [&] {
    return ChunkCatCall(srcs, n, world, chunk_counts, dst, dst_dtype, scale, nullptr, stream);
  });
}

WEFT_API weftResult_t weftChunkCatEx(const weftTensor_t* srcs, int n, int world, const size_t* chunk_counts,
                                     void* dst, weftDataType_t dst_dtype, float scale,
                                     const weftKernelConfig_t* config, void* stream) {
  return Guard("weftChunkCatEx", [&] {
    return ChunkCatCall(srcs, n, world, chunk_counts, dst, dst_dtype, scale, config, stream);
  });
}

WEFT_API weftResult_t weftChunkSplit(const void* src, weftDataType_t src_dtype, int world,
                                     const size_t* chunk_counts, const weftTensor_t* dsts, int n, float scale,
                                     int accumulate, void* stream) {
  return Guard("weftChunkSplit", [&] {
    return ChunkSplitCall(src, src_dtype, world, chunk_counts, dsts, n, scale, accumulate, nullptr, stream);
  });
}

WEFT_API weftResult_t weftChunkSplitEx(const void* src, weftDataType_t src_dtype, int world,
                                       const size_t* chunk_counts, const weftTensor_t* dsts, int n, float scale,
                                       int accumulate, const weftKernelConfig_t* config, void* stream) {
  return Guard("weftChunkSplitEx", [&] {
    return ChunkSplitCall(src, src_dtype, world, chunk_counts, dsts, n, scale, accumulate, config, stream);
  });
}

WEFT_API weftResult_t weftFlattenPlanCreate(const weftTensor_t* srcs, int n, void* dst, weftDataType_t dst_dtype,
                                            const size_t* offsets, weftCopyPlan_t* plan) {
  return Guard("weftFlattenPlanCreate", [&]() -> absl::Status {
    if (plan == nullptr) return weft::InvalidArgument("plan is NULL");
    ASSIGN_OR_RETURN(std::vector<TensorRef> s, Tensors("srcs", srcs, n));
    return NewPlan(CopyPlan::Flatten(s, dst, DataTypeOf(dst_dtype), offsets), plan);
  });
}

WEFT_API weftResult_t weftUnflattenPlanCreate(const void* src, weftDataType_t src_dtype, const size_t* offsets,
                                              const weftTensor_t* dsts, int n, int accumulate,
                                              weftCopyPlan_t* plan) {
  return Guard("weftUnflattenPlanCreate", [&]() -> absl::Status {
    if (plan == nullptr) return weft::InvalidArgument("plan is NULL");
    ASSIGN_OR_RETURN(std::vector<TensorRef> d, Tensors("dsts", dsts, n));
    return NewPlan(CopyPlan::Unflatten(src, DataTypeOf(src_dtype), offsets, d, accumulate != 0), plan);
  });
}

WEFT_API weftResult_t weftCopyPlanExecute(weftCopyPlan_t plan, float scale, void* stream) {
  return Guard("weftCopyPlanExecute", [&]() -> absl::Status {
    RETURN_IF_ERROR(Live<weftCopyPlan>::Check("plan", plan));
    return plan->impl.Run(scale, stream);
  });
}

WEFT_API weftResult_t weftCopyPlanDestroy(weftCopyPlan_t plan) {
  return Guard("weftCopyPlanDestroy", [&]() -> absl::Status {
    RETURN_IF_ERROR(Live<weftCopyPlan>::Check("plan", plan));
    Live<weftCopyPlan>::Remove(plan);
    delete plan;
    return absl::OkStatus();
  });
}
