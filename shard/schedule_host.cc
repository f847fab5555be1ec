// shard/schedule_streams.h on a host stream.
#include "absl/container/flat_hash_map.h"
#include "core/status.h"
#include "shard/schedule_streams.h"

namespace weft {
namespace shard {
namespace {

class HostStreams final : public ScheduleStreams {
 public:
  explicit HostStreams(HostStream* stream) : stream_(stream) {}

  MemKind kind() const override { return MemKind::kHost; }
  absl::Status CheckGroup(const char* what, const ShardGroup& g) const override {
    if (g.memory_kind() == MemKind::kHost) return absl::OkStatus();
    return InvalidArgument("%s: the group's communicator is on %s memory, but the schedule was made for host "
                           "memory (config memory)", what, Name(g.memory_kind()));
  }
  absl::StatusOr<void*> Comm(const ShardGroup&) override { return static_cast<void*>(stream_); }
  void* release_stream() const override { return nullptr; }
  absl::Status Gathered(const ShardGroup* g) override {
    marks_[g] = stream_->Mark();
    return absl::OkStatus();
  }
  absl::Status Ready(const ShardGroup* g) override {
    Settle(g);
    // A failed gather surfaces here rather than as wrong parameters.
    return stream_->PendingError();
  }
  absl::StatusOr<std::chrono::steady_clock::time_point> GatheredAt(const ShardGroup* g) override {
    auto it = marks_.find(g);
    if (it == marks_.end()) return InvalidUsage("GatheredAt: the group was never gathered by this schedule");
    return stream_->ReachedAt(it->second);
  }
  void Settle(const ShardGroup* g) override {
    auto it = marks_.find(g);
    if (it != marks_.end()) stream_->WaitFor(it->second);
  }
  absl::Status AfterCaller() override { return absl::OkStatus(); }
  void Handoff() override { stream_->WaitFor(stream_->Mark()); }
  absl::Status EndStep() override { return stream_->Synchronize(); }
  void Finish() override {
    if (stream_ != nullptr) stream_->Synchronize().IgnoreError();
  }
  void CallerStreamGone() override { stream_ = nullptr; }

 private:
  HostStream* stream_;
  absl::flat_hash_map<const ShardGroup*, uint64_t> marks_;  // each group's latest gather
};

}  // namespace

std::unique_ptr<ScheduleStreams> HostScheduleStreams(HostStream* stream) {
  return std::make_unique<HostStreams>(stream);
}

}  // namespace shard
}  // namespace weft
