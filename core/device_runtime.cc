#include "core/device_runtime.h"

#include <atomic>

#include "core/status.h"

namespace weft {
namespace {
std::atomic<const DeviceRuntime*> g_runtime{nullptr};
}  // namespace

bool RegisterDeviceRuntime(const DeviceRuntime* r) {
  g_runtime.store(r, std::memory_order_release);
  return true;
}

const DeviceRuntime* GetDeviceRuntime() { return g_runtime.load(std::memory_order_acquire); }

absl::StatusOr<const DeviceRuntime*> RequireDeviceRuntime(const char* who) {
  const DeviceRuntime* rt = GetDeviceRuntime();
  if (rt == nullptr) return Unsupported("%s on CUDA memory needs weft built with CUDA (this build has none)", who);
  return rt;
}

DeviceScope::DeviceScope(const DeviceRuntime* rt, int device) : rt_(rt) {
  absl::StatusOr<int> current = rt_->CurrentDevice();
  if (!current.ok()) {
    status_ = current.status();
    return;
  }
  if (*current == device) return;
  status_ = rt_->SetDevice(device);
  if (status_.ok()) saved_ = *current;
}

DeviceScope::~DeviceScope() {
  if (saved_ >= 0) (void)rt_->SetDevice(saved_);
}

}  // namespace weft
