// Group calls (Communicator::GroupStart / GroupEnd), NCCL's ncclGroupStart /
// ncclGroupEnd for every backend.
//
// A group is per thread, as NCCL's is. On host memory, calls made inside it
// are checked at once (a refused call is refused there, and held nowhere)
// and held in order; the outermost GroupEnd issues the held sends first and
// then the other calls in the order they were made. A host send never waits
// for its receiver, so once every rank's sends are out, the receives and
// collectives of the group complete whatever order each rank made them in:
// that is what lets ranks post a receive before the matching send (torch's
// batch_isend_irecv) without deadlock. Device backends register their own
// group calls (RegisterGroupHooks), which NCCL uses to fuse the group's
// calls into one launch.
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

#include "comm/communicator.h"
#include "core/status.h"

namespace weft {
namespace {

struct Held {
  Communicator* comm;
  const char* name;
  void* stream;
  std::function<absl::Status()> op;
  CallRole role;
};

struct Group {
  int depth = 0;
  std::vector<Held> held;
};

thread_local Group group;

struct Hooks {
  absl::Status (*start)() = nullptr;
  absl::Status (*end)() = nullptr;
};

Hooks& DeviceHooks() {
  static Hooks hooks;
  return hooks;
}

}  // namespace

void RegisterGroupHooks(absl::Status (*start)(), absl::Status (*end)()) {
  DeviceHooks() = {start, end};
}

bool Communicator::InGroup() { return group.depth > 0; }

absl::Status Communicator::Hold(const char* name, void* stream, std::function<absl::Status()> op, CallRole role) {
  group.held.push_back({this, name, stream, std::move(op), role});
  return absl::OkStatus();
}

absl::Status Communicator::GroupStart() {
  if (DeviceHooks().start != nullptr) RETURN_IF_ERROR(DeviceHooks().start());
  ++group.depth;
  return absl::OkStatus();
}

absl::Status Communicator::GroupEnd() {
  if (group.depth == 0) return InvalidUsage("group_end: no group is open on this thread (call weftGroupStart first)");
  if (--group.depth > 0) {
    return DeviceHooks().end != nullptr ? DeviceHooks().end() : absl::OkStatus();
  }
  std::vector<Held> held = std::move(group.held);
  group.held.clear();
  absl::Status status = DeviceHooks().end != nullptr ? DeviceHooks().end() : absl::OkStatus();
  // Sends first, then the rest, each pass in the order the calls were made.
  size_t issued = 0;
  for (bool sends : {true, false}) {
    for (Held& h : held) {
      if ((h.role.kind == CallRole::Kind::kSend) != sends || !status.ok()) continue;
      status = h.comm->IssueNow(h.name, h.stream, std::move(h.op), h.role);
      ++issued;
    }
  }
  if (!status.ok() && issued < held.size()) {
    return Annotate(status, absl::StrFormat("group_end (the group's other %zu calls were not issued)",
                                            held.size() - issued));
  }
  return Annotate(status, "group_end");
}

}  // namespace weft
