#include "shard/staging.h"

#include <functional>

#include "core/device_runtime.h"
#include "core/status.h"

namespace weft {
namespace shard {
namespace {

// Copies `in_bytes` from `in` to device memory, runs `op(device_in,
// device_out, stream)`, copies `out_bytes` back to `out`, and waits.
absl::Status Staged(const char* what, const void* in, size_t in_bytes, void* out, size_t out_bytes,
                    void* given_stream, const std::function<absl::Status(void*, void*, void*)>& op) {
  ASSIGN_OR_RETURN(const DeviceRuntime* rt, RequireDeviceRuntime(what));
  void* stream = given_stream;
  if (stream == nullptr) {
    ASSIGN_OR_RETURN(stream, rt->CreateStream());
  }
  absl::Status st;
  void* d_in = nullptr;
  void* d_out = nullptr;
  absl::StatusOr<void*> a = rt->AllocAsync(in_bytes, stream);
  if (a.ok()) d_in = *a;
  else st = a.status();
  if (st.ok()) {
    a = rt->AllocAsync(out_bytes, stream);
    if (a.ok()) d_out = *a;
    else st = a.status();
  }
  if (st.ok() && in_bytes > 0) st = rt->CopyAsync(d_in, in, in_bytes, stream);
  if (st.ok()) st = op(d_in, d_out, stream);
  if (st.ok() && out_bytes > 0) st = rt->CopyAsync(out, d_out, out_bytes, stream);
  if (d_in != nullptr) (void)rt->FreeAsync(d_in, stream);
  if (d_out != nullptr) (void)rt->FreeAsync(d_out, stream);
  const absl::Status synced = rt->SynchronizeStream(stream);
  if (st.ok()) st = synced;
  if (given_stream == nullptr) rt->DestroyStream(stream);
  return Annotate(st, what);
}

}  // namespace

absl::Status StagedAllGather(Communicator& comm, const void* send, void* recv, size_t count, DataType t,
                             void* stream) {
  if (comm.memory() != MemKind::kCuda) return comm.AllGather(send, recv, count, t, nullptr);
  const size_t bytes = count * ElementSize(t);
  return Staged("all_gather staged through device memory", send, bytes, recv, bytes * comm.size(), stream,
                [&](void* in, void* out, void* s) { return comm.AllGather(in, out, count, t, s); });
}

absl::Status StagedAllReduce(Communicator& comm, void* buf, size_t count, DataType t, RedOp op, void* stream) {
  if (comm.memory() != MemKind::kCuda) return comm.AllReduce(buf, buf, count, t, op, nullptr);
  const size_t bytes = count * ElementSize(t);
  return Staged("all_reduce staged through device memory", buf, bytes, buf, bytes, stream,
                [&](void* in, void* out, void* s) { return comm.AllReduce(in, out, count, t, op, s); });
}

absl::Status StagedBroadcast(Communicator& comm, void* buf, size_t count, DataType t, int root, void* stream) {
  if (comm.memory() != MemKind::kCuda) return comm.Broadcast(buf, buf, count, t, root, nullptr);
  const size_t bytes = count * ElementSize(t);
  return Staged("broadcast staged through device memory", buf, bytes, buf, bytes, stream,
                [&](void* in, void* out, void* s) { return comm.Broadcast(in, out, count, t, root, s); });
}

}  // namespace shard
}  // namespace weft
