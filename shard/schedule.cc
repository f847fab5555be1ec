#include "shard/schedule.h"

#include <utility>

#include "core/status.h"

namespace weft {
namespace shard {

ShardSchedule::ShardSchedule(HostStream* stream, bool reshard_after_forward)
    : stream_(stream), reshard_after_forward_(reshard_after_forward) {}

absl::Status ShardSchedule::SetOrder(std::vector<ShardGroup*> order) {
  absl::flat_hash_map<ShardGroup*, int> position;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] == nullptr) return InvalidArgument("order[%zu] is NULL", i);
    if (!position.emplace(order[i], static_cast<int>(i)).second) {
      return InvalidArgument("order[%zu] repeats an earlier group", i);
    }
  }
  order_ = std::move(order);
  position_ = std::move(position);
  order_known_ = true;
  recording_ = false;
  return absl::OkStatus();
}

void ShardSchedule::CountGathered() {
  int n = 0;
  for (ShardGroup* g : order_) n += g->unsharded() ? 1 : 0;
  gathered_ = n;
  max_gathered_ = std::max(max_gathered_, n);
}

absl::Status ShardSchedule::Gather(ShardGroup* g) {
  if (g->unsharded()) return absl::OkStatus();  // gathered, or its gather is in flight
  RETURN_IF_ERROR(g->Unshard(stream_));
  pending_[g] = stream_->Mark();
  CountGathered();
  return absl::OkStatus();
}

absl::Status ShardSchedule::Ready(ShardGroup* g) {
  RETURN_IF_ERROR(Gather(g));
  if (auto it = pending_.find(g); it != pending_.end()) {
    stream_->WaitFor(it->second);
    pending_.erase(it);
    // A failed gather surfaces here rather than as wrong parameters.
    RETURN_IF_ERROR(stream_->PendingError());
  }
  return absl::OkStatus();
}

absl::Status ShardSchedule::Release(ShardGroup* g) {
  if (!reshard_after_forward_) return absl::OkStatus();
  return Drop(g);
}

absl::Status ShardSchedule::Drop(ShardGroup* g) {
  // A gather still in flight writes the buffers: let it finish first.
  if (auto it = pending_.find(g); it != pending_.end()) {
    stream_->WaitFor(it->second);
    pending_.erase(it);
  }
  RETURN_IF_ERROR(g->Reshard());
  CountGathered();
  return absl::OkStatus();
}

absl::Status ShardSchedule::BeginStep() {
  max_gathered_ = 0;
  if (reshard_after_forward_) return absl::OkStatus();
  // ZeRO-1/2 keep groups gathered; the optimizer has updated the shards since.
  for (ShardGroup* g : order_) RETURN_IF_ERROR(Drop(g));
  return absl::OkStatus();
}

void ShardSchedule::Prefetch(ShardGroup* g, int direction) {
  if (!order_known_) return;
  auto it = position_.find(g);
  if (it == position_.end()) return;
  const int k = it->second + direction;
  // Only the neighbour: with the group in use that makes two gathers at most.
  if (k >= 0 && k < static_cast<int>(order_.size())) Gather(order_[k]).IgnoreError();  // surfaces in Ready
}

absl::Status ShardSchedule::PreForward(ShardGroup* g) {
  if (g == nullptr) return InvalidArgument("group is NULL");
  if (recording_ && !position_.contains(g)) {
    position_[g] = static_cast<int>(order_.size());
    order_.push_back(g);
  }
  RETURN_IF_ERROR(Ready(g));
  Prefetch(g, +1);
  return absl::OkStatus();
}

absl::Status ShardSchedule::PostForward(ShardGroup* g) {
  if (g == nullptr) return InvalidArgument("group is NULL");
  return Release(g);
}

absl::Status ShardSchedule::PreBackward(ShardGroup* g) {
  if (g == nullptr) return InvalidArgument("group is NULL");
  RETURN_IF_ERROR(Ready(g));
  Prefetch(g, -1);
  return absl::OkStatus();
}

absl::Status ShardSchedule::PostBackward(ShardGroup* g, absl::Span<const kernels::TensorRef> grads) {
  if (g == nullptr) return InvalidArgument("group is NULL");
  RETURN_IF_ERROR(g->ReduceGrads(grads, stream_));
  return Release(g);
}

absl::Status ShardSchedule::PostBackwardFlat(ShardGroup* g, void* grads, DataType t) {
  if (g == nullptr) return InvalidArgument("group is NULL");
  RETURN_IF_ERROR(g->ReduceGradsFlat(grads, t, stream_));
  return Release(g);
}

absl::Status ShardSchedule::EndStep() {
  const absl::Status s = stream_->Synchronize();
  pending_.clear();
  if (recording_ && !order_.empty()) {
    recording_ = false;
    order_known_ = true;
  }
  return s;
}

}  // namespace shard
}  // namespace weft
