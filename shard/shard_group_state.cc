// A shard group's full state (shard/shard_group.h): loading full parameters
// into the shards and gathering or scattering whole groups for checkpoints.
// All blocking, on the group's own stream. The full tensors may be host
// memory (checkpoints live there) or the group's: a CUDA group copies host
// tensors through one host buffer of the group's unsharded size (one group
// materialised at a time), and uses the device kernels for device tensors.
#include <vector>

#include "core/memory.h"
#include "core/status.h"
#include "shard/shard_group.h"
#include "shard/staging.h"

namespace weft {
namespace shard {
namespace {

using kernels::TensorRef;

// True when `p` can be copied into or out of by `mem`'s Copy (CUDA: any
// memory; host: not device memory).
bool Copyable(const MemoryOps& mem, const void* p) { return mem.kind() == MemKind::kCuda || Usable(mem, p); }

// Whether tensors ptrs[i] (named what[i], numel[i] elements) go through host
// staging: those of a CUDA group, all on the host. They must all sit on one
// side; a host group takes host (or managed) memory only.
absl::StatusOr<bool> StagedOnHost(const MemoryOps& mem, const char* what, absl::Span<const void* const> ptrs,
                                  absl::Span<const size_t> numel) {
  int first = -1;
  for (size_t i = 0; i < ptrs.size(); ++i) {
    if (numel[i] == 0) continue;
    if (ptrs[i] == nullptr) return InvalidArgument("%s[%zu] is NULL (%zu elements)", what, i, numel[i]);
    const PointerKind k = ClassifyPointer(ptrs[i]);
    if (mem.kind() == MemKind::kHost && k == PointerKind::kDevice) {
      return InvalidArgument("%s[%zu] = %p is device memory, but the group's communicator is on host memory", what,
                             i, ptrs[i]);
    }
    if (first < 0) {
      first = static_cast<int>(i);
    } else if (Usable(mem, ptrs[i]) != Usable(mem, ptrs[first])) {
      return InvalidArgument("%s[%zu] = %p is %s memory but %s[%d] = %p is %s memory (pass all of them on the host "
                             "or all on the group's device)", what, i, ptrs[i], Name(k), what, first, ptrs[first],
                             Name(ClassifyPointer(ptrs[first])));
    }
  }
  return first >= 0 && !Usable(mem, ptrs[first]);
}

}  // namespace

absl::Status ShardGroup::LoadFromFull(absl::Span<const float* const> full) {
  if (full.size() != layout_.numel.size()) {
    return InvalidArgument("full has %zu parameters, the group %zu", full.size(), layout_.numel.size());
  }
  for (const ParamShard& s : shards_) {
    if (s.length == 0) continue;
    if (full[s.param] == nullptr) return InvalidArgument("full[%d] is NULL", s.param);
    if (!Copyable(*mem_, full[s.param])) {
      return InvalidArgument("full[%d] = %p is device memory, but the group's communicator is on host memory",
                             s.param, full[s.param]);
    }
  }
  CurrentDevice on(*mem_);
  RETURN_IF_ERROR(on.status());
  RETURN_IF_ERROR(mem_->Zero(master_, layout_.shard_numel * sizeof(float), own_stream_));
  for (const ParamShard& s : shards_) {
    RETURN_IF_ERROR(mem_->Copy(master_ + s.shard_offset, full[s.param] + s.param_offset, s.length * sizeof(float),
                               own_stream_));
  }
  return mem_->Synchronize(own_stream_);
}

absl::Status ShardGroup::UnpackFull(const void* tmp, absl::Span<float* const> out, void* stream) {
  if (out.size() != layout_.numel.size()) {
    return InvalidArgument("out has %zu parameters, the group %zu", out.size(), layout_.numel.size());
  }
  std::vector<TensorRef> dsts;
  std::vector<const void*> ptrs;
  for (size_t i = 0; i < out.size(); ++i) {
    dsts.push_back({out[i], layout_.numel[i], DataType::kFloat32});
    ptrs.push_back(out[i]);
  }
  ASSIGN_OR_RETURN(const bool staged, StagedOnHost(*mem_, "out", ptrs, layout_.numel));
  if (!staged) return Unpack(tmp, DataType::kFloat32, dsts, stream);
  std::vector<float> host(layout_.unsharded_numel());
  RETURN_IF_ERROR(mem_->Copy(host.data(), tmp, host.size() * sizeof(float), stream));
  RETURN_IF_ERROR(mem_->Synchronize(stream));
  return Unpack(host.data(), DataType::kFloat32, dsts, nullptr);
}

absl::Status ShardGroup::PackFull(absl::Span<const float* const> full, void* tmp, void* stream,
                                  std::vector<float>* staging) {
  if (full.size() != layout_.numel.size()) {
    return InvalidArgument("full has %zu parameters, the group %zu", full.size(), layout_.numel.size());
  }
  std::vector<TensorRef> srcs;
  std::vector<const void*> ptrs;
  for (size_t i = 0; i < full.size(); ++i) {
    srcs.push_back({const_cast<float*>(full[i]), layout_.numel[i], DataType::kFloat32});
    ptrs.push_back(full[i]);
  }
  ASSIGN_OR_RETURN(const bool staged, StagedOnHost(*mem_, "full", ptrs, layout_.numel));
  if (!staged) return Pack(srcs, tmp, DataType::kFloat32, stream, *mem_);
  // `staging` outlives the copy: the caller synchronises the stream before dropping it.
  staging->assign(layout_.unsharded_numel(), 0.0f);
  RETURN_IF_ERROR(Pack(srcs, staging->data(), DataType::kFloat32, nullptr, *HostMemoryOps()));
  return mem_->Copy(tmp, staging->data(), staging->size() * sizeof(float), stream);
}

absl::Status ShardGroup::GatherFull(int root, absl::Span<float* const> out, const float* shard) {
  if (root >= comm_->size()) return InvalidArgument("root = %d is outside [0, %d)", root, comm_->size());
  if (shard != nullptr && !Copyable(*mem_, shard)) {
    return InvalidArgument("shard = %p is device memory, but the group's communicator is on host memory", shard);
  }
  CurrentDevice on(*mem_);
  RETURN_IF_ERROR(on.status());
  void* const s = own_stream_;
  ASSIGN_OR_RETURN(void* tmp, pool_->Get(layout_.unsharded_numel() * sizeof(float), s));
  void* slot = Slot(tmp, DataType::kFloat32);
  absl::Status st = mem_->Copy(slot, shard != nullptr ? shard : master_, layout_.shard_numel * sizeof(float), s);
  // The collective first, so a receiving rank's bad `out` cannot leave its peers waiting.
  if (st.ok()) st = comm_->AllGather(slot, tmp, layout_.shard_numel, DataType::kFloat32, s);
  if (st.ok() && (root < 0 || root == comm_->rank())) st = UnpackFull(tmp, out, s);
  const absl::Status synced = mem_->Synchronize(s);
  if (st.ok()) st = synced;
  pool_->PutOnStream(tmp, s);
  return st;
}

absl::Status ShardGroup::ScatterFull(int root, absl::Span<const float* const> full, float* shard) {
  if (root < 0 || root >= comm_->size()) return InvalidArgument("root = %d is outside [0, %d)", root, comm_->size());
  if (shard != nullptr && !Copyable(*mem_, shard)) {
    return InvalidArgument("shard = %p is device memory, but the group's communicator is on host memory", shard);
  }
  CurrentDevice on(*mem_);
  RETURN_IF_ERROR(on.status());
  void* const s = own_stream_;
  ASSIGN_OR_RETURN(void* tmp, pool_->Get(layout_.unsharded_numel() * sizeof(float), s));
  std::vector<float> staging;
  absl::Status st;
  if (root == comm_->rank()) st = PackFull(full, tmp, s, &staging);
  // Root says whether its state is good before sending it, so a refusal on
  // root fails every rank instead of scattering garbage or leaving them waiting.
  int32_t root_ok = st.ok() ? 1 : 0;
  absl::Status c = StagedBroadcast(*comm_, &root_ok, 1, DataType::kInt32, root, s);
  if (c.ok() && root_ok) {
    c = comm_->Broadcast(tmp, tmp, layout_.unsharded_numel(), DataType::kFloat32, root, s);
  } else if (c.ok() && st.ok()) {
    c = RemoteError("root %d refused its full state; shards unchanged", root);
  }
  if (st.ok()) st = c;
  if (st.ok()) {
    st = mem_->Copy(shard != nullptr ? shard : master_, Slot(tmp, DataType::kFloat32),
                    layout_.shard_numel * sizeof(float), s);
  }
  const absl::Status synced = mem_->Synchronize(s);
  if (st.ok()) st = synced;
  pool_->PutOnStream(tmp, s);
  return st;
}

}  // namespace shard
}  // namespace weft
