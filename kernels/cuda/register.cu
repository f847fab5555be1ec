// Makes the CUDA kernels known to kernels/kernels.cc (kernels/device.h) when
// this library is loaded.
#include "kernels/cuda/launch.h"
#include "kernels/device.h"

namespace weft {
namespace kernels {
namespace cuda {

namespace {

int PlanCreate(const Segment* segments, size_t n, bool accumulate, void** plan) {
  DevicePlan* p = nullptr;
  const int e = CopyPlanCreate(segments, n, accumulate, &p);
  *plan = p;
  return e;
}
int PlanRun(const void* plan, float scale, void* stream) {
  return CopyPlanRun(static_cast<const DevicePlan*>(plan), scale, stream);
}
int PlanDestroy(void* plan) { return CopyPlanDestroy(static_cast<DevicePlan*>(plan)); }

const DeviceKernels kCudaKernels = {"cuda",     &CopySegments, &Unscale,     &L2Norm,
                                    &PlanCreate, &PlanRun,     &PlanDestroy, &ErrorString};
[[maybe_unused]] const bool kRegistered = RegisterDeviceKernels(&kCudaKernels);

}  // namespace
}  // namespace cuda
}  // namespace kernels
}  // namespace weft
