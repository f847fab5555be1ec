// shard/memory_ops.h on CUDA memory, through the device runtime
// (core/device_runtime.h): nothing here includes a CUDA header, and in a
// build without CUDA DeviceMemoryOps is a clean Unsupported.
#include "core/status.h"
#include "core/stream.h"
#include "shard/memory_ops.h"

namespace weft {
namespace shard {
namespace {

class DeviceOps final : public MemoryOps {
 public:
  DeviceOps(const DeviceRuntime* rt, int device) : rt_(rt), device_(device) {}

  MemKind kind() const override { return MemKind::kCuda; }
  int device() const override { return device_; }
  absl::Status CheckStream(const char* what, void* stream) const override {
    if (HostStream::Find(stream) != nullptr) {
      return InvalidArgument("%s = %p is a weft host stream, but the group's communicator is on CUDA memory "
                             "(device %d): pass a cudaStream_t, or NULL for the legacy default stream",
                             what, stream, device_);
    }
    return absl::OkStatus();
  }
  bool stream_ordered() const override { return true; }
  absl::StatusOr<void*> Alloc(size_t bytes, void* stream) const override {
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    return rt_->AllocAsync(bytes, stream);
  }
  void Free(void* p, void* stream) const override {
    if (p == nullptr) return;
    DeviceScope on(rt_, device_);
    // A failure here means the context is gone; the memory goes with it.
    if (on.status().ok()) (void)rt_->FreeAsync(p, stream);
  }
  absl::Status Zero(void* p, size_t bytes, void* stream) const override {
    if (bytes == 0) return absl::OkStatus();
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    return rt_->MemsetAsync(p, 0, bytes, stream);
  }
  absl::Status Copy(void* dst, const void* src, size_t bytes, void* stream) const override {
    if (bytes == 0) return absl::OkStatus();
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    return rt_->CopyAsync(dst, src, bytes, stream);
  }
  absl::Status Synchronize(void* stream) const override {
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    return rt_->SynchronizeStream(stream);
  }
  absl::StatusOr<void*> CreateStream() const override {
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    return rt_->CreateStream();
  }
  void DestroyStream(void* stream) const override {
    if (stream == nullptr) return;
    DeviceScope on(rt_, device_);
    rt_->DestroyStream(stream);
  }

 private:
  const DeviceRuntime* const rt_;
  const int device_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const MemoryOps>> DeviceMemoryOps(int device) {
  ASSIGN_OR_RETURN(const DeviceRuntime* rt, RequireDeviceRuntime("a shard group"));
  if (device < 0) return InvalidArgument("device = %d is negative", device);
  return std::shared_ptr<const MemoryOps>(std::make_shared<DeviceOps>(rt, device));
}

}  // namespace shard
}  // namespace weft
