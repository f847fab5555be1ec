#include "kernels/device.h"

#include <atomic>

namespace weft {
namespace kernels {
namespace {
std::atomic<const DeviceKernels*> g_device{nullptr};
}  // namespace

bool RegisterDeviceKernels(const DeviceKernels* k) {
  g_device.store(k, std::memory_order_release);
  return true;
}

const DeviceKernels* GetDeviceKernels() { return g_device.load(std::memory_order_acquire); }

}  // namespace kernels
}  // namespace weft
