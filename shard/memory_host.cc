// shard/memory_ops.h on host memory, and what both memories share.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/memory.h"
#include "core/status.h"
#include "core/stream.h"
#include "shard/memory_ops.h"

namespace weft {
namespace shard {
namespace {

constexpr size_t kHostAlign = 64;

// Runs `fn` now, or enqueued on the host stream `stream`.
absl::Status Run(void* stream, std::function<void()> fn) {
  if (stream == nullptr) {
    fn();
    return absl::OkStatus();
  }
  static_cast<HostStream*>(stream)->Enqueue([fn = std::move(fn)] {
    fn();
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

class HostOps final : public MemoryOps {
 public:
  MemKind kind() const override { return MemKind::kHost; }
  absl::Status CheckStream(const char* what, void* stream) const override {
    if (stream != nullptr && HostStream::Find(stream) == nullptr) {
      return InvalidArgument("%s = %p is not a live weft host stream (the group's communicator is on host memory)",
                             what, stream);
    }
    return absl::OkStatus();
  }
  bool stream_ordered() const override { return false; }
  absl::StatusOr<void*> Alloc(size_t bytes, void*) const override {
    const size_t size = (std::max<size_t>(bytes, 1) + kHostAlign - 1) / kHostAlign * kHostAlign;
    void* p = std::aligned_alloc(kHostAlign, size);
    if (p == nullptr) return SystemError("out of host memory allocating %zu bytes", size);
    return p;
  }
  void Free(void* p, void* stream) const override {
    if (p != nullptr) (void)Run(stream, [p] { std::free(p); });
  }
  absl::Status Zero(void* p, size_t bytes, void* stream) const override {
    if (bytes == 0) return absl::OkStatus();
    return Run(stream, [p, bytes] { std::memset(p, 0, bytes); });
  }
  absl::Status Copy(void* dst, const void* src, size_t bytes, void* stream) const override {
    if (bytes == 0) return absl::OkStatus();
    return Run(stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  absl::Status Synchronize(void* stream) const override {
    if (stream == nullptr) return absl::OkStatus();
    auto* s = static_cast<HostStream*>(stream);
    s->WaitFor(s->Mark());
    return s->PendingError();
  }
  absl::StatusOr<void*> CreateStream() const override { return nullptr; }
  void DestroyStream(void*) const override {}
};

}  // namespace

std::shared_ptr<const MemoryOps> HostMemoryOps() {
  static const auto* const ops = new std::shared_ptr<const MemoryOps>(std::make_shared<HostOps>());
  return *ops;
}

absl::StatusOr<std::shared_ptr<const MemoryOps>> MemoryOpsFor(const Communicator& comm, const char* who) {
  if (comm.memory() != MemKind::kCuda) return HostMemoryOps();
  ASSIGN_OR_RETURN(const DeviceRuntime* rt, RequireDeviceRuntime(who));
  absl::StatusOr<int> count = rt->DeviceCount();
  if (!count.ok()) return Annotate(count.status(), absl::StrFormat("%s on a CUDA communicator", who));
  int device = comm.options().cuda_device;
  if (device < 0) {
    absl::StatusOr<int> current = rt->CurrentDevice();
    if (!current.ok()) return Annotate(current.status(), absl::StrFormat("%s: the current CUDA device", who));
    device = *current;
  }
  if (device >= *count) {
    return InvalidArgument("the communicator's cuda_device = %d, but this machine has %d CUDA device(s)", device,
                           *count);
  }
  return DeviceMemoryOps(device);
}

CurrentDevice::CurrentDevice(const MemoryOps& mem) {
  if (mem.kind() != MemKind::kCuda) return;
  const DeviceRuntime* rt = GetDeviceRuntime();
  if (rt == nullptr) {
    status_ = Unsupported("CUDA memory needs weft built with CUDA (this build has none)");
    return;
  }
  scope_.emplace(rt, mem.device());
  status_ = scope_->status();
}

bool Usable(const MemoryOps& mem, const void* p) { return Compatible(ClassifyPointer(p), mem.kind()); }

}  // namespace shard
}  // namespace weft
