#include "shard/schedule.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/status.h"

namespace weft {
namespace shard {

ShardSchedule::ShardSchedule(std::unique_ptr<ScheduleStreams> streams, ScheduleOptions options)
    : streams_(std::move(streams)), options_(std::move(options)) {}

ShardSchedule::~ShardSchedule() {
  streams_->Finish();
  // Pool-held groups keep their buffers until their own Reshard or
  // destruction (they may be gone already); acquired ones go back.
  if (!options_.buffers.release) return;
  for (auto& [g, h] : held_) {
    if (h.full != nullptr) options_.buffers.release(g, h.full);
  }
}

absl::Status ShardSchedule::SetOrder(std::vector<ShardGroup*> order) {
  if (in_step_) return InvalidUsage("SetOrder during a step (call it before BeginStep or after EndStep)");
  absl::flat_hash_map<ShardGroup*, int> position;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] == nullptr) return InvalidArgument("order[%zu] is NULL", i);
    RETURN_IF_ERROR(streams_->CheckGroup(absl::StrFormat("order[%zu]", i).c_str(), *order[i]));
    if (!position.emplace(order[i], static_cast<int>(i)).second) {
      return InvalidArgument("order[%zu] repeats order[%d]", i, position[order[i]]);
    }
  }
  order_ = std::move(order);
  position_ = std::move(position);
  order_known_ = true;
  recording_ = false;
  return absl::OkStatus();
}

absl::Status ShardSchedule::SetReshardAfterForward(ShardGroup* g, bool reshard) {
  if (g == nullptr) return InvalidArgument("SetReshardAfterForward: group is NULL");
  RETURN_IF_ERROR(streams_->CheckGroup("SetReshardAfterForward", *g));
  if (in_step_) {
    return InvalidUsage("SetReshardAfterForward during a step (call it before BeginStep or after EndStep)");
  }
  reshard_after_forward_[g] = reshard;
  return absl::OkStatus();
}

bool ShardSchedule::reshard_after_forward(ShardGroup* g) const {
  auto it = reshard_after_forward_.find(g);
  return it != reshard_after_forward_.end() ? it->second : options_.reshard_after_forward;
}

absl::Status ShardSchedule::CheckCall(const char* what, ShardGroup* g) const {
  if (g == nullptr) return InvalidArgument("%s: group is NULL", what);
  RETURN_IF_ERROR(streams_->CheckGroup(what, *g));
  if (!in_step_) return InvalidUsage("%s outside a step (call BeginStep first)", what);
  return absl::OkStatus();
}

absl::Status ShardSchedule::CheckOpen(const char* post, const char* pre,
                                      const absl::flat_hash_map<ShardGroup*, int>& open, ShardGroup* g) const {
  auto it = open.find(g);
  if (it != open.end() && it->second > 0) return absl::OkStatus();
  return InvalidUsage("%s of a group with no %s of it open in this step (each %s follows its group's %s)", post, pre,
                      post, pre);
}

void* ShardSchedule::full(ShardGroup* g) const {
  auto it = held_.find(g);
  if (it == held_.end()) return nullptr;
  if (it->second.full != nullptr) return it->second.full;
  auto p = g->FullParam(0);
  return p.ok() ? *p : nullptr;
}

absl::Status ShardSchedule::Gather(ShardGroup* g) {
  if (held_.contains(g)) return absl::OkStatus();  // gathered, or its gather is in flight
  ASSIGN_OR_RETURN(void* stream, streams_->Comm(*g));
  void* full = nullptr;
  if (options_.buffers.acquire) {
    const size_t bytes = g->full_numel() * ElementSize(g->options().param_dtype);
    ASSIGN_OR_RETURN(full, options_.buffers.acquire(g, bytes));
    if (full == nullptr && bytes > 0) return SystemError("acquire returned NULL for %zu bytes", bytes);
    // The framework's memory may still be read by its earlier work.
    absl::Status s = streams_->AfterCaller();
    if (s.ok()) s = g->UnshardInto(full, stream);
    if (!s.ok()) {
      streams_->Handoff();  // part of the gather may be enqueued
      options_.buffers.release(g, full);
      return s;
    }
  } else {
    RETURN_IF_ERROR(g->Unshard(stream));
  }
  held_[g] = Held{full, true};
  max_gathered_ = std::max(max_gathered_, gathered());
  return streams_->Gathered(g);
}

absl::Status ShardSchedule::Ready(ShardGroup* g) {
  RETURN_IF_ERROR(Gather(g));
  Held& h = held_[g];
  if (h.pending) {
    RETURN_IF_ERROR(streams_->Ready(g));
    h.pending = false;
  }
  return absl::OkStatus();
}

absl::Status ShardSchedule::Release(ShardGroup* g) {
  if (!options_.reshard_after_forward) return absl::OkStatus();
  return Drop(g);
}

absl::Status ShardSchedule::ReleaseAfterForward(ShardGroup* g) {
  if (!reshard_after_forward(g)) return absl::OkStatus();
  return Drop(g);
}

absl::Status ShardSchedule::Drop(ShardGroup* g) {
  auto it = held_.find(g);
  if (it == held_.end()) return absl::OkStatus();
  // A gather still in flight writes the buffers: whoever gets them next comes after it.
  if (it->second.pending) streams_->Settle(g);
  void* full = it->second.full;
  held_.erase(it);
  if (full != nullptr) {
    options_.buffers.release(g, full);
    return absl::OkStatus();
  }
  // The caller may have read the parameters: the memory is reused after that.
  RETURN_IF_ERROR(streams_->AfterCaller());
  return g->ReshardAfter(streams_->release_stream());
}

absl::Status ShardSchedule::BeginStep() {
  if (in_step_) return InvalidUsage("BeginStep: the last step was not ended (call EndStep)");
  in_step_ = true;
  open_forward_.clear();
  open_backward_.clear();
  max_gathered_ = gathered();
  // The optimizer has updated the shards on the caller's side: gathers come after.
  RETURN_IF_ERROR(streams_->AfterCaller());
  // ZeRO-1/2 keep groups gathered; the optimizer has updated the shards since.
  std::vector<ShardGroup*> held;
  for (const auto& [g, h] : held_) held.push_back(g);
  for (ShardGroup* g : held) RETURN_IF_ERROR(Drop(g));
  return absl::OkStatus();
}

void ShardSchedule::Prefetch(ShardGroup* g, int direction) {
  if (!options_.prefetch || !order_known_) return;
  auto it = position_.find(g);
  if (it == position_.end()) return;
  const int k = it->second + direction;
  // Only the neighbour: with the group in use that makes two gathers at most.
  if (k >= 0 && k < static_cast<int>(order_.size())) Gather(order_[k]).IgnoreError();  // surfaces in Ready
}

absl::Status ShardSchedule::PreForward(ShardGroup* g) {
  RETURN_IF_ERROR(CheckCall("PreForward", g));
  if (recording_ && !position_.contains(g)) {
    position_[g] = static_cast<int>(order_.size());
    order_.push_back(g);
  }
  RETURN_IF_ERROR(Ready(g));
  ++open_forward_[g];
  Prefetch(g, +1);
  return absl::OkStatus();
}

absl::Status ShardSchedule::PostForward(ShardGroup* g) {
  RETURN_IF_ERROR(CheckCall("PostForward", g));
  RETURN_IF_ERROR(CheckOpen("PostForward", "PreForward", open_forward_, g));
  RETURN_IF_ERROR(ReleaseAfterForward(g));
  --open_forward_[g];
  return absl::OkStatus();
}

absl::Status ShardSchedule::PreBackward(ShardGroup* g) {
  RETURN_IF_ERROR(CheckCall("PreBackward", g));
  RETURN_IF_ERROR(Ready(g));
  ++open_backward_[g];
  Prefetch(g, -1);
  return absl::OkStatus();
}

absl::Status ShardSchedule::PostBackward(ShardGroup* g, absl::Span<const kernels::TensorRef> grads) {
  RETURN_IF_ERROR(CheckCall("PostBackward", g));
  RETURN_IF_ERROR(CheckOpen("PostBackward", "PreBackward", open_backward_, g));
  ASSIGN_OR_RETURN(void* stream, streams_->Comm(*g));
  RETURN_IF_ERROR(streams_->AfterCaller());  // the caller produced the gradients
  RETURN_IF_ERROR(g->ReduceGrads(grads, stream));
  --open_backward_[g];  // the reduction is enqueued: this Post call has happened
  return Release(g);
}

absl::Status ShardSchedule::PostBackwardFlat(ShardGroup* g, void* grads, DataType t) {
  RETURN_IF_ERROR(CheckCall("PostBackwardFlat", g));
  RETURN_IF_ERROR(CheckOpen("PostBackwardFlat", "PreBackward", open_backward_, g));
  ASSIGN_OR_RETURN(void* stream, streams_->Comm(*g));
  RETURN_IF_ERROR(streams_->AfterCaller());  // the caller produced the gradients
  RETURN_IF_ERROR(g->ReduceGradsFlat(grads, t, stream));
  --open_backward_[g];
  return Release(g);
}

absl::Status ShardSchedule::EndStep() {
  if (!in_step_) return InvalidUsage("EndStep outside a step (call BeginStep first)");
  absl::Status s = streams_->EndStep();
  if (s.ok() && memory() == MemKind::kCuda) {
    // The host does not wait for CUDA work here, so what the collectives
    // reported so far (NCCL's async errors, sticky: the communicator is
    // broken) is what the step can surface.
    for (ShardGroup* g : order_) {
      for (Communicator* c : {g->comm(), g->replicas()}) {
        if (c != nullptr && s.ok()) s = c->async_error();
      }
    }
  }
  for (auto& [g, h] : held_) h.pending = false;
  in_step_ = false;
  if (recording_ && !order_.empty()) {
    recording_ = false;
    order_known_ = true;
  }
  if (options_.reshard_after_forward) {
    std::vector<ShardGroup*> held;
    for (const auto& [g, h] : held_) held.push_back(g);
    for (ShardGroup* g : held) {
      if (const absl::Status d = Drop(g); s.ok()) s = d;
    }
  }
  return s;
}

}  // namespace shard
}  // namespace weft
