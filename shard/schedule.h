// Drives a model's shard groups through training steps: each group is
// gathered before its forward and its backward, the next group's all-gather
// overlapping the current group's compute, and released after use.
//
// The order of groups is declared (SetOrder) or recorded in the first
// forward; prefetching starts once it is known. At most two all-gathers are
// in flight: the group in use and the one prefetched, which is what bounds
// peak memory to the shards plus about two groups (plus any group kept
// gathered from its forward to its backward: SetReshardAfterForward). Work
// runs on one stream (shard/schedule_streams.h): on host memory a
// HostStream, where waiting for a group's gather waits for that gather alone
// (a stream mark), not for the gradient reductions queued behind it; on
// CUDA memory the schedule's own stream, and "waiting" for a gather is the
// caller's cudaStream_t waiting on an event (the host never waits).
//
// Full parameters live in weft's pool (ShardGroup::Unshard; read them with
// FullParam), or in memory the framework hands over through FullBuffers
// (ShardGroup::UnshardInto): PyTorch must keep the tensors autograd saved in
// forward pointing at the same storage when backward gathers again.
//
//   ShardSchedule s(&stream, {.reshard_after_forward = true});   // ZeRO-3
//   s.BeginStep();
//   for each group g in order:         s.PreForward(g); compute; s.PostForward(g);
//   for each group g in reverse:       s.PreBackward(g); compute; s.PostBackward(g, grads);
//   s.EndStep();                        // gradient shards complete, nothing gathered
#ifndef WEFT_SHARD_SCHEDULE_H_
#define WEFT_SHARD_SCHEDULE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/stream.h"
#include "shard/schedule_streams.h"
#include "shard/shard_group.h"

namespace weft {
namespace shard {

// Framework-owned full buffers. acquire returns `bytes` (g->full_numel()
// elements of param_dtype) for g's gather; release gets them back once the
// schedule is done with them (the gather into them has run). Both are called
// on the thread that calls the schedule, never on the stream's thread. CUDA:
// the caller's stream is ordered after the gather into the buffer before
// release, and the gather after the caller's work when acquire returned it.
struct FullBuffers {
  std::function<absl::StatusOr<void*>(ShardGroup* g, size_t bytes)> acquire;
  std::function<void(ShardGroup* g, void* full)> release;
};

struct ScheduleOptions {
  // ZeRO-3 (true) frees each group after its forward and its backward;
  // ZeRO-1/2 (false) keep groups gathered through the step.
  bool reshard_after_forward = true;
  // false: gather each group only when it is needed (a baseline to measure prefetch against).
  bool prefetch = true;
  FullBuffers buffers;  // unset: weft's pool
};

class ShardSchedule {
 public:
  // Host memory, on `stream`.
  ShardSchedule(HostStream* stream, ScheduleOptions options)
      : ShardSchedule(HostScheduleStreams(stream), std::move(options)) {}
  ShardSchedule(HostStream* stream, bool reshard_after_forward)
      : ShardSchedule(stream, ScheduleOptions{reshard_after_forward, true, {}}) {}
  // Either memory (HostScheduleStreams, DeviceScheduleStreams).
  ShardSchedule(std::unique_ptr<ScheduleStreams> streams, ScheduleOptions options);
  ~ShardSchedule();  // waits for the (comm) stream, releases what is still gathered

  MemKind memory() const { return streams_->kind(); }
  // Host: the stream was destroyed before the schedule (its destruction
  // waited for its work): the destructor must not touch it. Only destruction
  // may follow.
  void StreamDestroyed() { streams_->CallerStreamGone(); }

  // The forward order; backward is its reverse. Optional; not during a step.
  absl::Status SetOrder(std::vector<ShardGroup*> order);
  const std::vector<ShardGroup*>& order() const { return order_; }
  bool order_known() const { return order_known_; }

  // Whether g is released after its forward, overriding the schedule's
  // reshard_after_forward for this group. FSDP's root is the case: its
  // parameters (a language model's embeddings) are used first in the
  // forward and last in the backward, so releasing them after the forward
  // only means gathering them again for the backward, with nothing left to
  // hide that gather behind. Kept (false), the group stays gathered until
  // its PostBackward (ZeRO-3) and its backward gather costs nothing; its
  // memory is held from its forward to its backward. Not during a step.
  absl::Status SetReshardAfterForward(ShardGroup* g, bool reshard);
  bool reshard_after_forward(ShardGroup* g) const;

  // At the start of each step. ZeRO-1/2: releases the groups kept gathered,
  // whose shards the optimizer has updated since, so they are gathered anew.
  absl::Status BeginStep();
  // Returns when g's parameters are gathered (CUDA: once the caller's stream
  // waits for the gather).
  absl::Status PreForward(ShardGroup* g);
  // Each Post call follows a Pre call of the same group in the same step
  // (InvalidUsage otherwise, changing nothing).
  absl::Status PostForward(ShardGroup* g);
  absl::Status PreBackward(ShardGroup* g);
  // Enqueues the reduction of g's gradients, then releases g (ZeRO-3).
  absl::Status PostBackward(ShardGroup* g, absl::Span<const kernels::TensorRef> grads);
  absl::Status PostBackwardFlat(ShardGroup* g, void* grads, DataType t);
  // Waits for every reduction (CUDA: the caller's stream waits); the order
  // is known from now on; ZeRO-3 releases any group still gathered
  // (prefetched but unused). Host: returns the first error of the step's
  // async work; CUDA: the first async error the groups' communicators
  // reported so far (the step's own work may still be running).
  absl::Status EndStep();
  bool in_step() const { return in_step_; }

  // Where g's full parameters are (the pool's buffer, or the acquired one);
  // nullptr when the schedule holds g sharded.
  void* full(ShardGroup* g) const;
  // Groups gathered (or being gathered) now, and the most at once during the
  // current or last step.
  int gathered() const { return static_cast<int>(held_.size()); }
  int max_gathered() const { return max_gathered_; }
  // When g's latest gather completed, once PreForward or PreBackward of g
  // returned (host memory): what a device computing on g would have waited
  // for, as opposed to when the calling thread got a core back. Profilers
  // and weft-shard-bench's simulated device use it.
  absl::StatusOr<std::chrono::steady_clock::time_point> GatheredAt(ShardGroup* g) {
    return streams_->GatheredAt(g);
  }

 private:
  struct Held {
    void* full = nullptr;    // acquired buffer; nullptr: the pool's (g->FullParam)
    bool pending = false;    // the caller has not been ordered after the gather yet
  };
  absl::Status CheckCall(const char* what, ShardGroup* g) const;
  // A Post call closes one Pre call of its group in this step (`open` counts
  // them): InvalidUsage when none is open. Closed once the Post call succeeded.
  absl::Status CheckOpen(const char* post, const char* pre, const absl::flat_hash_map<ShardGroup*, int>& open,
                         ShardGroup* g) const;
  absl::Status Gather(ShardGroup* g);   // enqueue unless already gathered or in flight
  absl::Status Ready(ShardGroup* g);    // wait for its gather
  absl::Status Release(ShardGroup* g);  // ZeRO-3 only
  absl::Status ReleaseAfterForward(ShardGroup* g);  // as g's setting says
  absl::Status Drop(ShardGroup* g);     // reshard, after any gather in flight
  void Prefetch(ShardGroup* g, int direction);

  const std::unique_ptr<ScheduleStreams> streams_;
  const ScheduleOptions options_;
  std::vector<ShardGroup*> order_;
  bool order_known_ = false;
  bool recording_ = true;
  bool in_step_ = false;
  absl::flat_hash_map<ShardGroup*, Held> held_;
  absl::flat_hash_map<ShardGroup*, int> position_;
  absl::flat_hash_map<ShardGroup*, bool> reshard_after_forward_;  // per-group overrides
  // Pre calls of this step not yet matched by their Post call, per group.
  absl::flat_hash_map<ShardGroup*, int> open_forward_, open_backward_;
  int max_gathered_ = 0;
};

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_SCHEDULE_H_
