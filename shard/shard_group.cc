#include "shard/shard_group.h"

#include <utility>

#include "core/memory.h"
#include "core/status.h"
#include "core/trace.h"
#include "shard/staging.h"

namespace weft {
namespace shard {
namespace {

using kernels::TensorRef;

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
  return h >> 1;  // fits int64, and so does its negation
}

// Refuses a tensor (named what[i]) that work on `mem` cannot touch.
absl::Status CheckUsable(const MemoryOps& mem, const char* what, size_t i, const void* p, size_t count) {
  if (count == 0 || Usable(mem, p)) return absl::OkStatus();
  return InvalidArgument("%s[%zu] = %p is %s memory, but the group's communicator is on %s memory", what, i, p,
                         Name(ClassifyPointer(p)), Name(mem.kind()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardGroup>> ShardGroup::Create(Communicator* comm, Communicator* replicas,
                                                               absl::Span<const ParamSpec> params,
                                                               const ShardGroupOptions& options, BufferPool* pool) {
  if (comm == nullptr) return InvalidArgument("comm is NULL");
  if (pool == nullptr) return InvalidArgument("pool is NULL");
  if (replicas != nullptr && replicas->memory() != comm->memory()) {
    return InvalidArgument("replicas are on %s memory but comm on %s memory", Name(replicas->memory()),
                           Name(comm->memory()));
  }
  if (!IsComputeType(options.param_dtype)) {
    return InvalidArgument("param_dtype = %s (expected float32, bfloat16 or float16)", Name(options.param_dtype));
  }
  if (!IsComputeType(options.reduce_dtype)) {
    return InvalidArgument("reduce_dtype = %s (expected float32, bfloat16 or float16)", Name(options.reduce_dtype));
  }
  // Without CUDA (build or machine) every rank fails here alike, before any collective.
  ASSIGN_OR_RETURN(std::shared_ptr<const MemoryOps> mem, MemoryOpsFor(*comm, "a shard group"));
  RETURN_IF_ERROR(pool->Bind(mem));
  ASSIGN_OR_RETURN(ShardLayout layout, PlanShards(params, comm->size(), options.layout));
  CurrentDevice on(*mem);
  RETURN_IF_ERROR(on.status());
  std::unique_ptr<ShardGroup> g(new ShardGroup(comm, replicas, std::move(layout), options, pool, std::move(mem)));
  const absl::Status local = g->Allocate();
  // Every rank must have planned the same group and allocated it: one
  // all-reduce (min) of the digest, its negation (the max) and an ok flag.
  const int64_t mine = static_cast<int64_t>(Digest(g->layout_));
  int64_t words[3] = {mine, -mine, local.ok() ? 1 : 0};
  RETURN_IF_ERROR(StagedAllReduce(*comm, words, 3, DataType::kInt64, RedOp::kMin, g->own_stream_));
  RETURN_IF_ERROR(local);
  if (words[2] == 0) return RemoteError("rank %d: another rank could not allocate its shards (see its error)",
                                        comm->rank());
  if (words[0] != -words[1]) {
    return InvalidUsage("rank %d: the ranks passed different parameter lists for this shard group (%zu "
                        "parameters, %zu elements here)", comm->rank(), g->layout_.numel.size(),
                        g->layout_.total_numel);
  }
  return g;
}

ShardGroup::ShardGroup(Communicator* comm, Communicator* replicas, ShardLayout layout,
                       const ShardGroupOptions& options, BufferPool* pool, std::shared_ptr<const MemoryOps> mem)
    : comm_(comm),
      replicas_(replicas),
      layout_(std::move(layout)),
      shards_(layout_.RankShards(comm->rank())),
      options_(options),
      pool_(pool),
      mem_(std::move(mem)) {
  size_t at = 0;
  for (size_t i = 0; i < layout_.numel.size(); ++i) {
    if (layout_.kind == LayoutKind::kPerParam) chunk_counts_.push_back(layout_.chunk_rows[i] * layout_.row_numel[i]);
    full_offsets_.push_back(at);
    at += layout_.numel[i];
  }
}

absl::Status ShardGroup::Allocate() {
  ASSIGN_OR_RETURN(own_stream_, mem_->CreateStream());
  const size_t bytes = layout_.shard_numel * sizeof(float);
  ASSIGN_OR_RETURN(void* m, mem_->Alloc(bytes, own_stream_));
  master_ = static_cast<float*>(m);
  ASSIGN_OR_RETURN(void* g, mem_->Alloc(bytes, own_stream_));
  grads_ = static_cast<float*>(g);
  RETURN_IF_ERROR(mem_->Zero(master_, bytes, own_stream_));
  RETURN_IF_ERROR(mem_->Zero(grads_, bytes, own_stream_));
  // Callers' streams use the shards from now on: they must be zero by then.
  return mem_->Synchronize(own_stream_);
}

ShardGroup::~ShardGroup() {
  CurrentDevice on(*mem_);
  pool_->Put(gathered_);
  pool_->Put(full_);
  mem_->Free(master_, own_stream_);
  mem_->Free(grads_, own_stream_);
  if (own_stream_ != nullptr) {
    (void)mem_->Synchronize(own_stream_);
    mem_->DestroyStream(own_stream_);
  }
}

absl::Status ShardGroup::ZeroGrads() {
  CurrentDevice on(*mem_);
  RETURN_IF_ERROR(on.status());
  RETURN_IF_ERROR(mem_->Zero(grads_, layout_.shard_numel * sizeof(float), own_stream_));
  return mem_->Synchronize(own_stream_);
}

void* ShardGroup::Slot(void* unsharded, DataType t) const {
  return static_cast<char*>(unsharded) + static_cast<size_t>(comm_->rank()) * layout_.shard_numel * ElementSize(t);
}

void ShardGroup::PutAfter(void* p, void* stream) { pool_->PutOnStream(p, stream); }

absl::Status ShardGroup::Pack(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, void* stream,
                              const MemoryOps& mem) {
  if (layout_.kind == LayoutKind::kPerParam) {
    return kernels::ChunkCat(srcs, layout_.world, chunk_counts_.data(), dst, dst_t, 1.0f, stream);
  }
  RETURN_IF_ERROR(kernels::Flatten(srcs, dst, dst_t, layout_.offset.data(), 1.0f, stream));
  return ZeroPadding(dst, dst_t, stream, mem);
}

absl::Status ShardGroup::ZeroPadding(void* unsharded, DataType t, void* stream, const MemoryOps& mem) {
  // The flat layout's padding sits after the last parameter: it must reduce as zero.
  const size_t es = ElementSize(t);
  return mem.Zero(static_cast<char*>(unsharded) + layout_.total_numel * es, layout_.padding() * es, stream);
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
  const TensorRef master{master_, layout_.shard_numel, DataType::kFloat32};
  trace::Span span(comm_->trace(), "gather", "shard_group");
  span.Args("\"params\":%zu,\"elements\":%zu,\"dtype\":\"%s\"", layout_.numel.size(), layout_.total_numel, Name(t));
  const trace::Label label("shard group of %zu elements: gather", layout_.total_numel);
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
  RETURN_IF_ERROR(mem_->CheckStream("stream", stream));
  if (unsharded()) return InvalidUsage("Unshard: the group is already unsharded (call Reshard first)");
  CurrentDevice on(*mem_);
  RETURN_IF_ERROR(on.status());
  const size_t es = ElementSize(options_.param_dtype);
  // Stream-ordered: it may reuse gradients whose reduce-scatter is queued ahead of this gather.
  ASSIGN_OR_RETURN(void* gathered, pool_->Get(layout_.unsharded_numel() * es, stream));
  void* full = gathered;
  if (layout_.kind == LayoutKind::kPerParam) {
    absl::StatusOr<void*> f = pool_->Get(layout_.total_numel * es, stream);
    if (!f.ok()) {
      PutAfter(gathered, stream);
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
  RETURN_IF_ERROR(mem_->CheckStream("stream", stream));
  if (full == nullptr) return InvalidArgument("full is NULL");
  if (!Trusted() && !Usable(*mem_, full)) {
    return InvalidArgument("full = %p is %s memory, but the group's communicator is on %s memory", full,
                           Name(ClassifyPointer(full)), Name(mem_->kind()));
  }
  CurrentDevice on(*mem_);
  RETURN_IF_ERROR(on.status());
  if (layout_.kind == LayoutKind::kFlat) return GatherInto(full, full, stream);
  ASSIGN_OR_RETURN(void* gathered, pool_->Get(layout_.unsharded_numel() * ElementSize(options_.param_dtype), stream));
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

absl::Status ShardGroup::ReshardAfter(void* stream) {
  RETURN_IF_ERROR(mem_->CheckStream("stream", stream));
  if (!unsharded()) return absl::OkStatus();
  CurrentDevice on(*mem_);
  RETURN_IF_ERROR(on.status());
  trace::Span span(comm_->trace(), "reshard", "shard_group");
  span.Args("\"params\":%zu,\"elements\":%zu", layout_.numel.size(), layout_.total_numel);
  PutAfter(gathered_, stream);
  PutAfter(full_, stream);
  gathered_ = full_ = nullptr;
  return absl::OkStatus();
}

absl::Status ShardGroup::ReduceGrads(absl::Span<const TensorRef> grads, void* stream) {
  RETURN_IF_ERROR(mem_->CheckStream("stream", stream));
  if (grads.size() != layout_.numel.size()) {
    return InvalidArgument("grads has %zu tensors, the group %zu parameters", grads.size(), layout_.numel.size());
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].count != layout_.numel[i]) {
      return InvalidArgument("grads[%zu].count = %zu, but parameter %zu has %zu elements", i, grads[i].count, i,
                             layout_.numel[i]);
    }
    if (!Trusted()) RETURN_IF_ERROR(CheckUsable(*mem_, "grads", i, grads[i].data, grads[i].count));
  }
  CurrentDevice on(*mem_);
  RETURN_IF_ERROR(on.status());
  const DataType t = options_.reduce_dtype;
  ASSIGN_OR_RETURN(void* buf, pool_->Get(layout_.unsharded_numel() * ElementSize(t), stream));
  absl::Status s = Pack(grads, buf, t, stream, *mem_);
  if (s.ok()) s = ReducePacked(buf, stream);
  PutAfter(buf, stream);  // after whatever part of the work was enqueued
  return s;
}

absl::Status ShardGroup::ReduceGradsFlat(void* grads, DataType t, void* stream) {
  RETURN_IF_ERROR(mem_->CheckStream("stream", stream));
  if (layout_.kind != LayoutKind::kFlat) {
    return InvalidUsage("ReduceGradsFlat needs the flat layout (this group is per-parameter: use ReduceGrads)");
  }
  if (t != options_.reduce_dtype) {
    return InvalidArgument("grads are %s but the group reduces in %s", Name(t), Name(options_.reduce_dtype));
  }
  if (grads == nullptr && layout_.unsharded_numel() > 0) return InvalidArgument("grads is NULL");
  if (!Trusted() && !Usable(*mem_, grads)) {
    return InvalidArgument("grads = %p is %s memory, but the group's communicator is on %s memory", grads,
                           Name(ClassifyPointer(grads)), Name(mem_->kind()));
  }
  CurrentDevice on(*mem_);
  RETURN_IF_ERROR(on.status());
  RETURN_IF_ERROR(ZeroPadding(grads, t, stream, *mem_));
  return ReducePacked(grads, stream);
}

absl::Status ShardGroup::ReducePacked(void* buf, void* stream) {
  const DataType t = options_.reduce_dtype;
  void* slot = Slot(buf, t);
  const size_t n = layout_.shard_numel;
  const bool scatter = options_.reduction == GradReduction::kReduceScatter;
  trace::Span span(comm_->trace(), scatter ? "reduce_scatter" : "reduce_all", "shard_group");
  span.Args("\"params\":%zu,\"elements\":%zu,\"dtype\":\"%s\",\"hsdp\":%s", layout_.numel.size(),
            layout_.total_numel, Name(t), replicas_ != nullptr ? "true" : "false");
  const trace::Label label("shard group of %zu elements: %s", layout_.total_numel,
                           scatter ? "reduce_scatter" : "all_reduce");
  absl::Status s = options_.reduction == GradReduction::kReduceScatter
                       ? comm_->ReduceScatter(buf, slot, n, t, RedOp::kAvg, stream)
                       : comm_->AllReduce(buf, buf, layout_.unsharded_numel(), t, RedOp::kAvg, stream);
  if (s.ok() && replicas_ != nullptr) s = replicas_->AllReduce(slot, slot, n, t, RedOp::kAvg, stream);
  if (!s.ok()) return s;
  const size_t zero = 0;
  const TensorRef acc{grads_, n, DataType::kFloat32};
  return kernels::Unflatten(slot, t, &zero, {&acc, 1}, 1.0f, true, stream);
}

MemoryReport ShardGroup::memory() const {
  MemoryReport r;
  r.shard_bytes = layout_.shard_numel * sizeof(float);
  r.grad_shard_bytes = layout_.shard_numel * sizeof(float);
  const size_t es = ElementSize(options_.param_dtype);
  if (gathered_ != nullptr) r.unsharded_bytes += layout_.unsharded_numel() * es;
  if (full_ != nullptr) r.unsharded_bytes += layout_.total_numel * es;
  return r;
}

}  // namespace shard
}  // namespace weft
