// NCCL's group calls as weft's device group hooks (comm/group.cc), and the
// work that has to follow a collective on its stream.
//
// Inside an NCCL group a collective is not enqueued when it is called but by
// the outermost ncclGroupEnd. Work that must run on the stream after it
// (narrowing an int16 result, scaling a bfloat16 average, freeing their
// temporaries) is held until then, per thread as NCCL's group is, and
// enqueued right behind that ncclGroupEnd; outside a group it is enqueued at
// once.
#include <functional>
#include <utility>
#include <vector>

#include "comm/nccl/comm.h"
#include "core/status.h"

namespace weft {
namespace nccl {
namespace {

thread_local int group_depth = 0;
thread_local std::vector<std::function<absl::Status()>> after_group;

absl::Status GroupStartHook() {
  RETURN_IF_ERROR(ToStatus(ncclGroupStart(), "ncclGroupStart"));
  ++group_depth;
  return absl::OkStatus();
}

absl::Status GroupEndHook() {
  absl::Status status = ToStatus(ncclGroupEnd(), "ncclGroupEnd");
  if (group_depth > 0) --group_depth;
  if (group_depth > 0) return status;
  // Run even after a failed group end: they also free the temporaries.
  std::vector<std::function<absl::Status()>> held = std::move(after_group);
  after_group.clear();
  for (auto& f : held) status.Update(f());
  return status;
}

[[maybe_unused]] const bool kGroupHooks = (RegisterGroupHooks(&GroupStartHook, &GroupEndHook), true);

}  // namespace

absl::Status AfterCollective(std::function<absl::Status()> work) {
  if (group_depth == 0) return work();
  after_group.push_back(std::move(work));
  return absl::OkStatus();
}

}  // namespace nccl
}  // namespace weft
