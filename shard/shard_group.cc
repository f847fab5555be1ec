#include "shard/shard_group.h"

#include <cstring>
#include <utility>

#include "core/status.h"
#include "core/stream.h"

namespace weft {
namespace shard {
namespace {

using kernels::TensorRef;

absl::Status CheckStream(void* stream) {
  if (stream != nullptr && HostStream::Find(stream) == nullptr) {
    return InvalidArgument("stream = %p is not a live weft host stream (shard groups work on host memory)", stream);
  }
  return absl::OkStatus();
}

bool IsComputeType(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kBfloat16 || t == DataType::kFloat16;
}

// A digest of the parameter list that every rank must agree on.
uint64_t Digest(const ShardLayout& l) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(l.numel.size());
  for (size_t i = 0; i < l.numel.size(); ++i) {
    mix(l.numel[i]);
    if (!l.row_numel.empty()) mix(l.row_numel[i]);
  }
  return h >> 1;  // fits int64
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardGroup>> ShardGroup::Create(Communicator* comm, Communicator* replicas,
                                                               absl::Span<const ParamSpec> params,
                                                               const ShardGroupOptions& options, BufferPool* pool) {
  if (comm == nullptr) return InvalidArgument("comm is NULL");
  if (pool == nullptr) return InvalidArgument("pool is NULL");
  if (comm->memory() != MemKind::kHost) return Unsupported("shard groups work on host memory for now");
  if (!IsComputeType(options.param_dtype)) {
    return InvalidArgument("param_dtype = %s (expected float32, bfloat16 or float16)", Name(options.param_dtype));
  }
  if (!IsComputeType(options.reduce_dtype)) {
    return InvalidArgument("reduce_dtype = %s (expected float32, bfloat16 or float16)", Name(options.reduce_dtype));
  }
  ASSIGN_OR_RETURN(ShardLayout layout, PlanShards(params, comm->size(), options.layout));
  // Every rank must have planned the same group: compare digests (min and max agree).
  const int64_t mine = static_cast<int64_t>(Digest(layout));
  int64_t lo = mine, hi = mine;
  RETURN_IF_ERROR(comm->AllReduce(&lo, &lo, 1, DataType::kInt64, RedOp::kMin, nullptr));
  RETURN_IF_ERROR(comm->AllReduce(&hi, &hi, 1, DataType::kInt64, RedOp::kMax, nullptr));
  if (lo != hi) {
    return InvalidUsage("rank %d: the ranks passed different parameter lists for this shard group (%zu "
                        "parameters, %zu elements here)", comm->rank(), layout.numel.size(), layout.total_numel);
  }
  return std::unique_ptr<ShardGroup>(new ShardGroup(comm, replicas, std::move(layout), options, pool));
}

ShardGroup::ShardGroup(Communicator* comm, Communicator* replicas, ShardLayout layout,
                       const ShardGroupOptions& options, BufferPool* pool)
    : comm_(comm),
      replicas_(replicas),
      layout_(std::move(layout)),
      shards_(layout_.RankShards(comm->rank())),
      options_(options),
      pool_(pool),
      master_(layout_.shard_numel, 0.0f),
      grads_(layout_.shard_numel, 0.0f) {
  size_t at = 0;
  for (size_t i = 0; i < layout_.numel.size(); ++i) {
    if (layout_.kind == LayoutKind::kPerParam) chunk_counts_.push_back(layout_.chunk_rows[i] * layout_.row_numel[i]);
    full_offsets_.push_back(at);
    at += layout_.numel[i];
  }
}

ShardGroup::~ShardGroup() {
  pool_->Put(gathered_);
  pool_->Put(full_);
}

void ShardGroup::ZeroGrads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

absl::Status ShardGroup::LoadFromFull(absl::Span<const float* const> full) {
  if (full.size() != layout_.numel.size()) {
    return InvalidArgument("full has %zu parameters, the group %zu", full.size(), layout_.numel.size());
  }
  std::fill(master_.begin(), master_.end(), 0.0f);
  for (const ParamShard& s : shards_) {
    if (s.length == 0) continue;
    if (full[s.param] == nullptr) return InvalidArgument("full[%d] is NULL", s.param);
    std::memcpy(&master_[s.shard_offset], full[s.param] + s.param_offset, s.length * sizeof(float));
  }
  return absl::OkStatus();
}

void* ShardGroup::Slot(void* unsharded, DataType t) const {
  return static_cast<char*>(unsharded) + static_cast<size_t>(comm_->rank()) * layout_.shard_numel * ElementSize(t);
}

void ShardGroup::PutAfter(void* p, void* stream) {
  pool_->PutOnStream(p, stream == nullptr ? nullptr : HostStream::Find(stream));
}

absl::Status ShardGroup::Pack(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, void* stream) {
  if (layout_.kind == LayoutKind::kPerParam) {
    return kernels::ChunkCat(srcs, layout_.world, chunk_counts_.data(), dst, dst_t, 1.0f, stream);
  }
  RETURN_IF_ERROR(kernels::Flatten(srcs, dst, dst_t, layout_.offset.data(), 1.0f, stream));
  ZeroPadding(dst, dst_t, stream);
  return absl::OkStatus();
}

void ShardGroup::ZeroPadding(void* unsharded, DataType t, void* stream) {
  // The flat layout's padding sits after the last parameter: it must reduce as zero.
  const size_t es = ElementSize(t);
  char* tail = static_cast<char*>(unsharded) + layout_.total_numel * es;
  const size_t bytes = layout_.padding() * es;
  if (bytes == 0) return;
  if (stream == nullptr) {
    std::memset(tail, 0, bytes);
    return;
  }
  HostStream::Find(stream)->Enqueue([tail, bytes] {
    std::memset(tail, 0, bytes);
    return absl::OkStatus();
  });
}

absl::Status ShardGroup::Unpack(const void* src, DataType src_t, absl::Span<const TensorRef> dsts, void* stream) {
  if (layout_.kind == LayoutKind::kPerParam) {
    return kernels::ChunkSplit(src, src_t, layout_.world, chunk_counts_.data(), dsts, 1.0f, false, stream);
  }
  return kernels::Unflatten(src, src_t, layout_.offset.data(), dsts, 1.0f, false, stream);
}

size_t ShardGroup::full_numel() const {
  return layout_.kind == LayoutKind::kFlat ? layout_.unsharded_numel() : layout_.total_numel;
}

size_t ShardGroup::full_offset(int i) const {
  return layout_.kind == LayoutKind::kFlat ? layout_.offset[i] : full_offsets_[i];
}

// Flat: the all-gather output is the full buffer. Per-parameter: gather into
// `gathered`, then split the world's slabs into `full`.
absl::Status ShardGroup::GatherInto(void* gathered, void* full, void* stream) {
  const DataType t = options_.param_dtype;
  const size_t es = ElementSize(t);
  void* slot = Slot(gathered, t);
  const TensorRef master{master_.data(), master_.size(), DataType::kFloat32};
  RETURN_IF_ERROR(kernels::Flatten({&master, 1}, slot, t, nullptr, 1.0f, stream));
  RETURN_IF_ERROR(comm_->AllGather(slot, gathered, layout_.shard_numel, t, stream));
  if (layout_.kind == LayoutKind::kFlat) return absl::OkStatus();
  std::vector<TensorRef> dsts;
  for (size_t i = 0; i < layout_.numel.size(); ++i) {
    dsts.push_back({static_cast<char*>(full) + full_offsets_[i] * es, layout_.numel[i], t});
  }
  return Unpack(gathered, t, dsts, stream);
}

absl::Status ShardGroup::Unshard(void* stream) {
  RETURN_IF_ERROR(CheckStream(stream));
  if (unsharded()) return InvalidUsage("Unshard: the group is already unsharded (call Reshard first)");
  const size_t es = ElementSize(options_.param_dtype);
  // Stream-ordered: it may reuse gradients whose reduce-scatter is queued ahead of this gather.
  HostStream* const hs = stream == nullptr ? nullptr : HostStream::Find(stream);
  ASSIGN_OR_RETURN(void* gathered, pool_->Get(layout_.unsharded_numel() * es, hs));
  void* full = gathered;
  if (layout_.kind == LayoutKind::kPerParam) {
    absl::StatusOr<void*> f = pool_->Get(layout_.total_numel * es, hs);
    if (!f.ok()) {
      pool_->Put(gathered);
      return f.status();
    }
    full = *f;
  }
  const absl::Status s = GatherInto(gathered, full, stream);
  if (!s.ok()) {
    // Part of the work may be enqueued already: the buffers go back once it has run.
    PutAfter(gathered, stream);
    if (full != gathered) PutAfter(full, stream);
    return s;
  }
  gathered_ = gathered;
  if (full != gathered) full_ = full;
  return absl::OkStatus();
}

absl::Status ShardGroup::UnshardInto(void* full, void* stream) {
  RETURN_IF_ERROR(CheckStream(stream));
  if (full == nullptr) return InvalidArgument("full is NULL");
  if (layout_.kind == LayoutKind::kFlat) return GatherInto(full, full, stream);
  ASSIGN_OR_RETURN(void* gathered, pool_->Get(layout_.unsharded_numel() * ElementSize(options_.param_dtype),
                                               stream == nullptr ? nullptr : HostStream::Find(stream)));
  const absl::Status s = GatherInto(gathered, full, stream);
  PutAfter(gathered, stream);
  return s;
}

absl::StatusOr<void*> ShardGroup::FullParam(int i) const {
  if (i < 0 || static_cast<size_t>(i) >= layout_.numel.size()) {
    return InvalidArgument("param = %d is outside [0, %zu)", i, layout_.numel.size());
  }
  if (!unsharded()) return InvalidUsage("FullParam(%d): the group is sharded (call Unshard first)", i);
  const size_t es = ElementSize(options_.param_dtype);
  if (layout_.kind == LayoutKind::kPerParam) return static_cast<char*>(full_) + full_offsets_[i] * es;
  return static_cast<char*>(gathered_) + layout_.offset[i] * es;
}

absl::Status ShardGroup::Reshard() {
  if (!unsharded()) return absl::OkStatus();
  pool_->Put(gathered_);
  pool_->Put(full_);
  gathered_ = full_ = nullptr;
  return absl::OkStatus();
}

absl::Status ShardGroup::ReduceGrads(absl::Span<const TensorRef> grads, void* stream) {
  RETURN_IF_ERROR(CheckStream(stream));
  if (grads.size() != layout_.numel.size()) {
    return InvalidArgument("grads has %zu tensors, the group %zu parameters", grads.size(), layout_.numel.size());
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].count != layout_.numel[i]) {
      return InvalidArgument("grads[%zu].count = %zu, but parameter %zu has %zu elements", i, grads[i].count, i,
                             layout_.numel[i]);
    }
  }
  const DataType t = options_.reduce_dtype;
  ASSIGN_OR_RETURN(void* buf, pool_->Get(layout_.unsharded_numel() * ElementSize(t),
                                          stream == nullptr ? nullptr : HostStream::Find(stream)));
  absl::Status s = Pack(grads, buf, t, stream);
  if (s.ok()) s = ReducePacked(buf, stream);
  PutAfter(buf, stream);  // after whatever part of the work was enqueued
  return s;
}

absl::Status ShardGroup::ReduceGradsFlat(void* grads, DataType t, void* stream) {
  RETURN_IF_ERROR(CheckStream(stream));
  if (layout_.kind != LayoutKind::kFlat) {
    return InvalidUsage("ReduceGradsFlat needs the flat layout (this group is per-parameter: use ReduceGrads)");
  }
  if (t != options_.reduce_dtype) {
    return InvalidArgument("grads are %s but the group reduces in %s", Name(t), Name(options_.reduce_dtype));
  }
  if (grads == nullptr && layout_.unsharded_numel() > 0) return InvalidArgument("grads is NULL");
  ZeroPadding(grads, t, stream);
  return ReducePacked(grads, stream);
}

absl::Status ShardGroup::ReducePacked(void* buf, void* stream) {
  const DataType t = options_.reduce_dtype;
  void* slot = Slot(buf, t);
  const size_t n = layout_.shard_numel;
  absl::Status s = options_.reduction == GradReduction::kReduceScatter
                       ? comm_->ReduceScatter(buf, slot, n, t, RedOp::kAvg, stream)
                       : comm_->AllReduce(buf, buf, layout_.unsharded_numel(), t, RedOp::kAvg, stream);
  if (s.ok() && replicas_ != nullptr) s = replicas_->AllReduce(slot, slot, n, t, RedOp::kAvg, stream);
  if (!s.ok()) return s;
  const size_t zero = 0;
  const TensorRef acc{grads_.data(), n, DataType::kFloat32};
  return kernels::Unflatten(slot, t, &zero, {&acc, 1}, 1.0f, true, stream);
}

absl::Status ShardGroup::GatherFull(int root, absl::Span<float* const> out, const float* shard) {
  if (root >= comm_->size()) return InvalidArgument("root = %d is outside [0, %d)", root, comm_->size());
  ASSIGN_OR_RETURN(void* tmp, pool_->Get(layout_.unsharded_numel() * sizeof(float)));
  const float* src = shard != nullptr ? shard : master_.data();
  std::memcpy(Slot(tmp, DataType::kFloat32), src, master_.size() * sizeof(float));
  // The collective first, so a receiving rank's bad `out` cannot leave its peers waiting.
  absl::Status s = comm_->AllGather(Slot(tmp, DataType::kFloat32), tmp, layout_.shard_numel, DataType::kFloat32,
                                    nullptr);
  if (s.ok() && (root < 0 || root == comm_->rank())) {
    if (out.size() != layout_.numel.size()) {
      s = InvalidArgument("out has %zu parameters, the group %zu", out.size(), layout_.numel.size());
    } else {
      std::vector<TensorRef> dsts;
      for (size_t i = 0; i < out.size(); ++i) dsts.push_back({out[i], layout_.numel[i], DataType::kFloat32});
      s = Unpack(tmp, DataType::kFloat32, dsts, nullptr);
    }
  }
  pool_->Put(tmp);
  return s;
}

absl::Status ShardGroup::ScatterFull(int root, absl::Span<const float* const> full, float* shard) {
  if (root < 0 || root >= comm_->size()) return InvalidArgument("root = %d is outside [0, %d)", root, comm_->size());
  ASSIGN_OR_RETURN(void* tmp, pool_->Get(layout_.unsharded_numel() * sizeof(float)));
  absl::Status s;
  if (root == comm_->rank()) {
    if (full.size() != layout_.numel.size()) {
      s = InvalidArgument("full has %zu parameters, the group %zu", full.size(), layout_.numel.size());
    } else {
      std::vector<TensorRef> srcs;
      for (size_t i = 0; i < full.size(); ++i) {
        srcs.push_back({const_cast<float*>(full[i]), layout_.numel[i], DataType::kFloat32});
      }
      s = Pack(srcs, tmp, DataType::kFloat32, nullptr);
    }
  }
  // Root says whether its state is good before sending it, so a refusal on
  // root fails every rank instead of scattering garbage or leaving them waiting.
  int32_t root_ok = s.ok() ? 1 : 0;
  absl::Status c = comm_->Broadcast(&root_ok, &root_ok, 1, DataType::kInt32, root, nullptr);
  if (c.ok() && root_ok) {
    c = comm_->Broadcast(tmp, tmp, layout_.unsharded_numel(), DataType::kFloat32, root, nullptr);
  } else if (c.ok() && s.ok()) {
    c = RemoteError("root %d refused its full state; shards unchanged", root);
  }
  if (s.ok()) s = c;
  if (s.ok()) {
    std::memcpy(shard != nullptr ? shard : master_.data(), Slot(tmp, DataType::kFloat32),
                master_.size() * sizeof(float));
  }
  pool_->Put(tmp);
  return s;
}

MemoryReport ShardGroup::memory() const {
  MemoryReport r;
  r.shard_bytes = master_.size() * sizeof(float);
  r.grad_shard_bytes = grads_.size() * sizeof(float);
  const size_t es = ElementSize(options_.param_dtype);
  if (gathered_ != nullptr) r.unsharded_bytes += layout_.unsharded_numel() * es;
  if (full_ != nullptr) r.unsharded_bytes += layout_.total_numel * es;
  return r;
}

}  // namespace shard
}  // namespace weft
