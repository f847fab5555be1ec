#include "shard/reducer_device.h"

#include <utility>

#include "core/status.h"

namespace weft {
namespace shard {

absl::StatusOr<std::unique_ptr<DeviceSide>> DeviceSide::Create(int device, int num_grads) {
  ASSIGN_OR_RETURN(const DeviceRuntime* rt, RequireDeviceRuntime("the reducer"));
  RETURN_IF_ERROR(Annotate(rt->DeviceCount().status(), "the reducer's CUDA stream"));
  DeviceScope on(rt, device);
  RETURN_IF_ERROR(Annotate(on.status(), "the reducer's CUDA device"));
  std::unique_ptr<DeviceSide> d(new DeviceSide(rt, device));
  ASSIGN_OR_RETURN(d->stream_, rt->CreateStream());
  ASSIGN_OR_RETURN(d->sync_event_, rt->CreateEvent());
  d->events_.assign(num_grads, nullptr);
  d->producer_.assign(num_grads, nullptr);
  d->marked_at_.assign(num_grads, 0);
  return d;
}

DeviceSide::~DeviceSide() {
  DeviceScope on(rt_, device_);
  if (stream_ != nullptr) (void)rt_->SynchronizeStream(stream_);
  retired_.clear();  // nothing on the comm stream can run them now
  for (void* e : events_) {
    if (e != nullptr) rt_->DestroyEvent(e);
  }
  if (sync_event_ != nullptr) rt_->DestroyEvent(sync_event_);
  if (stream_ != nullptr) rt_->DestroyStream(stream_);
}

absl::Status DeviceSide::Produced(int g, void* caller) {
  if (events_[g] == nullptr) {
    ASSIGN_OR_RETURN(events_[g], rt_->CreateEvent());
  }
  RETURN_IF_ERROR(rt_->Record(events_[g], caller));
  producer_[g] = caller;
  marked_at_[g] = ++marks_;
  return absl::OkStatus();
}

absl::Status DeviceSide::WaitProduced(absl::Span<const int> grads) {
  // One wait per caller stream, on its latest event: it covers the earlier ones.
  std::vector<std::pair<void*, int>> latest;  // (stream, gradient)
  for (int g : grads) {
    if (marked_at_[g] == 0) continue;
    bool seen = false;
    for (auto& [s, h] : latest) {
      if (s != producer_[g]) continue;
      seen = true;
      if (marked_at_[g] > marked_at_[h]) h = g;
    }
    if (!seen) latest.emplace_back(producer_[g], g);
  }
  for (const auto& [s, g] : latest) RETURN_IF_ERROR(rt_->Wait(stream_, events_[g]));
  return absl::OkStatus();
}

absl::Status DeviceSide::After(void* caller) {
  RETURN_IF_ERROR(rt_->Record(sync_event_, caller));
  return rt_->Wait(stream_, sync_event_);
}

absl::Status DeviceSide::Handoff(void* caller) {
  RETURN_IF_ERROR(rt_->Record(sync_event_, stream_));
  return rt_->Wait(caller, sync_event_);
}

absl::Status DeviceSide::Synchronize() { return rt_->SynchronizeStream(stream_); }

void DeviceSide::Retire(kernels::CopyPlan plan) {
  if (plan.elements() == 0) return;  // holds no device memory
  if (retired_.size() >= kMaxRetired) retired_.clear();
  retired_.push_back(std::move(plan));
}

absl::StatusOr<void*> DeviceSide::Alloc(size_t bytes) {
  ASSIGN_OR_RETURN(void* p, rt_->AllocAsync(bytes, stream_));
  const absl::Status zeroed = rt_->MemsetAsync(p, 0, bytes, stream_);
  if (!zeroed.ok()) {
    (void)rt_->FreeAsync(p, stream_);
    return zeroed;
  }
  return p;
}

void DeviceSide::Free(void* p) {
  if (p != nullptr) (void)rt_->FreeAsync(p, stream_);
}

absl::Status DeviceSide::Zero(void* p, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  return rt_->MemsetAsync(p, 0, bytes, stream_);
}

absl::Status DeviceSide::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  return rt_->CopyAsync(dst, src, bytes, stream_);
}

}  // namespace shard
}  // namespace weft
