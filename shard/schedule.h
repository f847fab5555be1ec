// Drives a model's shard groups through training steps: each group is
// gathered before its forward and its backward, the next group's all-gather
// overlapping the current group's compute, and released after use.
//
// The order of groups is declared (SetOrder) or recorded in the first
// forward; prefetching starts once it is known. At most two all-gathers are
// in flight: the group in use and the one prefetched, which is what bounds
// peak memory to the shards plus about two groups. Work runs on one host
// stream; waiting for a group's gather waits for that gather alone (a stream
// mark), not for the gradient reductions queued behind it.
//
//   ShardSchedule s(&stream, /*reshard_after_forward=*/true);   // ZeRO-3
//   s.BeginStep();
//   for each group g in order:         s.PreForward(g); compute; s.PostForward(g);
//   for each group g in reverse:       s.PreBackward(g); compute; s.PostBackward(g, grads);
//   s.EndStep();                        // gradient shards complete
#ifndef WEFT_SHARD_SCHEDULE_H_
#define WEFT_SHARD_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/stream.h"
#include "shard/shard_group.h"

namespace weft {
namespace shard {

class ShardSchedule {
 public:
  // reshard_after_forward: ZeRO-3 (true) frees each group after its forward
  // and backward; ZeRO-1/2 (false) keep groups gathered through the step.
  ShardSchedule(HostStream* stream, bool reshard_after_forward);

  // The forward order; backward is its reverse. Optional.
  absl::Status SetOrder(std::vector<ShardGroup*> order);
  const std::vector<ShardGroup*>& order() const { return order_; }

  // At the start of each step. ZeRO-1/2: releases the groups kept gathered,
  // whose shards the optimizer has updated since, so they are gathered anew.
  absl::Status BeginStep();
  // Returns when g's parameters are gathered (FullParam is usable).
  absl::Status PreForward(ShardGroup* g);
  absl::Status PostForward(ShardGroup* g);
  absl::Status PreBackward(ShardGroup* g);
  // Enqueues the reduction of g's gradients, then releases g (ZeRO-3).
  absl::Status PostBackward(ShardGroup* g, absl::Span<const kernels::TensorRef> grads);
  absl::Status PostBackwardFlat(ShardGroup* g, void* grads, DataType t);
  // Waits for every reduction; the order is known from now on. Returns the first error of the step's async work.
  absl::Status EndStep();

  // Most groups gathered at once during the last step (test and report hook).
  int max_gathered() const { return max_gathered_; }

 private:
  absl::Status Gather(ShardGroup* g);   // enqueue unless already gathered or in flight
  absl::Status Ready(ShardGroup* g);    // wait for its gather
  absl::Status Release(ShardGroup* g);  // ZeRO-3 only
  absl::Status Drop(ShardGroup* g);     // reshard, after any gather in flight
  void Prefetch(ShardGroup* g, int direction);
  void CountGathered();

  HostStream* const stream_;
  const bool reshard_after_forward_;
  std::vector<ShardGroup*> order_;
  bool order_known_ = false;
  bool recording_ = true;
  absl::flat_hash_map<ShardGroup*, uint64_t> pending_;  // group -> stream mark of its gather
  absl::flat_hash_map<ShardGroup*, int> position_;
  int gathered_ = 0;
  int max_gathered_ = 0;
};

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_SCHEDULE_H_
