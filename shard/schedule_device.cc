// shard/schedule_streams.h on CUDA: the schedule's comm stream, one event
// per group for its latest gather, and one for the hand-offs between the
// comm stream and the caller's stream. Nothing here waits on the host but
// Finish (for the comm stream alone).
#include "absl/container/flat_hash_map.h"
#include "core/device_runtime.h"
#include "core/status.h"
#include "shard/schedule_streams.h"

namespace weft {
namespace shard {
namespace {

class DeviceStreams final : public ScheduleStreams {
 public:
  DeviceStreams(const DeviceRuntime* rt, void* caller) : rt_(rt), caller_(caller) {}
  ~DeviceStreams() override { Finish(); }

  MemKind kind() const override { return MemKind::kCuda; }
  absl::Status CheckGroup(const char* what, const ShardGroup& g) const override {
    if (g.memory_kind() != MemKind::kCuda) {
      return InvalidArgument("%s: the group's communicator is on %s memory, but the schedule was made for CUDA "
                             "memory (config memory)", what, Name(g.memory_kind()));
    }
    if (comm_ != nullptr && g.memory_ops().device() != device_) {
      return InvalidArgument("%s: the group is on CUDA device %d, but the schedule's groups on device %d", what,
                             g.memory_ops().device(), device_);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<void*> Comm(const ShardGroup& g) override {
    if (comm_ != nullptr) return comm_;
    device_ = g.memory_ops().device();
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    ASSIGN_OR_RETURN(void* sync, rt_->CreateEvent());
    sync_event_ = sync;
    ASSIGN_OR_RETURN(void* s, rt_->CreateStream());
    comm_ = s;
    // The first gathers read shards the caller's stream may still be updating.
    RETURN_IF_ERROR(AfterCaller());
    return comm_;
  }
  void* release_stream() const override { return comm_; }
  absl::Status Gathered(const ShardGroup* g) override {
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    void*& e = events_[g];
    if (e == nullptr) {
      ASSIGN_OR_RETURN(e, rt_->CreateEvent());
    }
    return rt_->Record(e, comm_);
  }
  absl::StatusOr<std::chrono::steady_clock::time_point> GatheredAt(const ShardGroup*) override {
    return Unsupported("GatheredAt: gathers on CUDA memory are not timed by the schedule (its events carry no "
                       "timing); use a CUDA profiler");
  }
  absl::Status Ready(const ShardGroup* g) override {
    auto it = events_.find(g);
    if (it == events_.end()) return InternalError("no gather was recorded for this group");
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    return rt_->Wait(caller_, it->second);
  }
  void Settle(const ShardGroup* g) override { Ready(g).IgnoreError(); }
  absl::Status AfterCaller() override {
    if (comm_ == nullptr) return absl::OkStatus();  // Comm orders the stream when it makes it
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    RETURN_IF_ERROR(rt_->Record(sync_event_, caller_));
    return rt_->Wait(comm_, sync_event_);
  }
  void Handoff() override { (void)Join(); }
  absl::Status EndStep() override { return Join(); }
  void Finish() override {
    if (comm_ == nullptr && sync_event_ == nullptr) return;
    DeviceScope on(rt_, device_);
    if (comm_ != nullptr) (void)rt_->SynchronizeStream(comm_);
    for (auto& [g, e] : events_) rt_->DestroyEvent(e);
    events_.clear();
    if (sync_event_ != nullptr) rt_->DestroyEvent(sync_event_);
    if (comm_ != nullptr) rt_->DestroyStream(comm_);
    comm_ = sync_event_ = nullptr;
  }

 private:
  // The caller's stream waits for the comm stream's work so far.
  absl::Status Join() {
    if (comm_ == nullptr) return absl::OkStatus();
    DeviceScope on(rt_, device_);
    RETURN_IF_ERROR(on.status());
    RETURN_IF_ERROR(rt_->Record(sync_event_, comm_));
    return rt_->Wait(caller_, sync_event_);
  }

  const DeviceRuntime* const rt_;
  void* const caller_;
  int device_ = -1;
  void* comm_ = nullptr;
  void* sync_event_ = nullptr;
  absl::flat_hash_map<const ShardGroup*, void*> events_;  // each group's latest gather
};

}  // namespace

absl::StatusOr<std::unique_ptr<ScheduleStreams>> DeviceScheduleStreams(void* caller) {
  // The argument first, so the refusal reads the same in every build.
  if (HostStream::Find(caller) != nullptr) {
    return InvalidArgument("stream = %p is a weft host stream, but the schedule is for CUDA memory (config memory): "
                           "pass the cudaStream_t the framework computes on, or NULL for the legacy default stream",
                           caller);
  }
  ASSIGN_OR_RETURN(const DeviceRuntime* rt, RequireDeviceRuntime("a shard schedule"));
  RETURN_IF_ERROR(Annotate(rt->DeviceCount().status(), "a shard schedule on CUDA memory"));
  return std::unique_ptr<ScheduleStreams>(std::make_unique<DeviceStreams>(rt, caller));
}

}  // namespace shard
}  // namespace weft
