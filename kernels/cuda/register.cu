// Makes the CUDA kernels known to kernels/kernels.cc (kernels/device.h) when
// this library is loaded.
#include "kernels/cuda/launch.h"
#include "kernels/device.h"

namespace weft {
namespace kernels {
namespace cuda {

namespace {

const DeviceKernels kCudaKernels = {"cuda", &CopySegments, &Unscale, &L2Norm, &ErrorString};
[[maybe_unused]] const bool kRegistered = RegisterDeviceKernels(&kCudaKernels);

}  // namespace
}  // namespace cuda
}  // namespace kernels
}  // namespace weft
