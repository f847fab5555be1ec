// The struct behind weftShardGroup_t, shared by the shard group and shard
// schedule entry points (capi/shard.cc, capi/shard_schedule.cc).
#ifndef WEFT_CAPI_SHARD_HANDLE_H_
#define WEFT_CAPI_SHARD_HANDLE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "capi/handles.h"
#include "shard/shard_group.h"
#include "weft/weft.h"

struct weftShardGroup {
  std::shared_ptr<weft::shard::BufferPool> pool;  // the communicator's: outlives impl
  std::unique_ptr<weft::shard::ShardGroup> impl;
  weftComm_t comm;  // checked live before every use but Destroy
};

namespace weft {
namespace capi {

// Checks `g` (named `what` in the error) and returns its group.
inline absl::StatusOr<shard::ShardGroup*> GetGroup(const char* what, weftShardGroup_t g) {
  RETURN_IF_ERROR(Live<weftShardGroup>::Check(what, g));
  RETURN_IF_ERROR(CheckOwner(absl::StrFormat("%s = %p", what, static_cast<const void*>(g)), g->comm));
  return g->impl.get();
}

// grads[0..n-1] as kernel tensor references, checked against g's parameter count.
absl::StatusOr<std::vector<kernels::TensorRef>> ReadGrads(const shard::ShardGroup& g, const weftTensor_t* grads,
                                                          int n);

}  // namespace capi
}  // namespace weft

#endif  // WEFT_CAPI_SHARD_HANDLE_H_
