// A shard group: parameters gathered and released together (a transformer
// block, an FSDP unit), the machinery under FSDP and ZeRO-1/2/3.
//
// Each rank keeps, for the group, its fp32 master shard and its fp32
// gradient shard (shard/layout.h says which elements). Around that:
//
//   Unshard     cast the master shard to the compute dtype straight into this
//               rank's slot of the unsharded buffer (one fused copy), then one
//               in-place all-gather; FullParam(i) points into the result
//               (per-parameter layout: after a split copy-out);
//   Reshard     return the unsharded buffers to the pool;
//   ReduceGrads full gradients -> the reduce dtype, laid out for the
//               collective in the same fused copy (flat, or FSDP2's chunk_cat),
//               one reduce-scatter with averaging (ZeRO-1: an all-reduce),
//               HSDP: an all-reduce of the shard across replicas, then += into
//               the fp32 gradient shard, so micro-batches accumulate in place;
//   GatherFull / ScatterFull  the full fp32 state for checkpoints, one group
//               at a time.
//
// Every step takes a `stream`, of the communicator's memory:
//   host memory   nullptr runs it now; a HostStream* enqueues it (copies and
//                 collectives in order on that stream, collectives keeping
//                 the communicator's issue order), which is how the next
//                 group's all-gather overlaps the current group's compute;
//   CUDA memory   a cudaStream_t (nullptr: the legacy default stream): the
//                 cast-copy kernels, the memsets and the NCCL collectives
//                 are enqueued on it and the call returns; nothing waits on
//                 the host or synchronises the device.
// Master and gradient shards live in the communicator's memory (CUDA: on its
// device). The steps documented as blocking (LoadFromFull, ZeroGrads,
// GatherFull, ScatterFull) run on a stream of the group's own and wait for
// it; their full tensors may be host memory (checkpoints) or the group's.
// Memory operations go through shard/memory_ops.h, so host and CUDA groups
// take the same steps.
//
//   ASSIGN_OR_RETURN(auto g, ShardGroup::Create(comm, nullptr, specs, opts, &pool));
//   RETURN_IF_ERROR(g->LoadFromFull(initial_params));
//   RETURN_IF_ERROR(g->Unshard(stream));  ... synchronise ...  use g->FullParam(i)
//   RETURN_IF_ERROR(g->ReduceGrads(grads, stream));
//   RETURN_IF_ERROR(g->Reshard());
#ifndef WEFT_SHARD_SHARD_GROUP_H_
#define WEFT_SHARD_SHARD_GROUP_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "kernels/kernels.h"
#include "shard/buffer_pool.h"
#include "shard/layout.h"
#include "shard/memory_ops.h"

namespace weft {
namespace shard {

enum class GradReduction : int {
  kReduceScatter = 0,  // ZeRO-2/3, FSDP
  kAllReduce = 1,      // ZeRO-1: every rank gets the full average, keeps its shard of it
};

struct ShardGroupOptions {
  LayoutKind layout = LayoutKind::kFlat;
  DataType param_dtype = DataType::kFloat32;   // unsharded parameters (compute)
  DataType reduce_dtype = DataType::kFloat32;  // gradient collective
  GradReduction reduction = GradReduction::kReduceScatter;
};

struct MemoryReport {
  size_t shard_bytes = 0;       // fp32 master shard
  size_t grad_shard_bytes = 0;  // fp32 gradient shard
  size_t unsharded_bytes = 0;   // this group's live unsharded buffers
};

class ShardGroup {
 public:
  // `comm` shards; `replicas` (may be nullptr) replicates (HSDP). Both must
  // outlive the group, as must `pool`, which is bound to comm's memory
  // (BufferPool::Bind). Collective over comm: every rank passes the same
  // parameter list. CUDA: Unsupported without CUDA in the build or a device.
  static absl::StatusOr<std::unique_ptr<ShardGroup>> Create(Communicator* comm, Communicator* replicas,
                                                            absl::Span<const ParamSpec> params,
                                                            const ShardGroupOptions& options, BufferPool* pool);
  ~ShardGroup();

  const ShardLayout& layout() const { return layout_; }
  Communicator* comm() const { return comm_; }
  Communicator* replicas() const { return replicas_; }
  const std::vector<ParamShard>& shards() const { return shards_; }
  const ShardGroupOptions& options() const { return options_; }
  MemKind memory_kind() const { return mem_->kind(); }
  const MemoryOps& memory_ops() const { return *mem_; }
  // The fp32 shards (shard_numel elements each) in the group's memory: on a
  // CUDA group these are device pointers.
  absl::Span<float> master() { return {master_, layout_.shard_numel}; }
  absl::Span<float> grads() { return {grads_, layout_.shard_numel}; }
  // Blocking; synchronise the streams the group's reductions ran on first.
  absl::Status ZeroGrads();

  // Copies this rank's part of each full fp32 parameter (host memory, or the
  // group's) into the master shard, padding zeroed. Blocking.
  absl::Status LoadFromFull(absl::Span<const float* const> full);

  absl::Status Unshard(void* stream);
  // Unshard into the caller's buffer of full_numel() elements of param_dtype
  // (a framework that must keep parameter addresses stable across reshards,
  // as PyTorch's saved tensors do, owns the memory). Parameter i starts at
  // element full_offset(i). The group stays sharded as far as Reshard and
  // FullParam are concerned.
  absl::Status UnshardInto(void* full, void* stream);
  size_t full_numel() const;
  size_t full_offset(int i) const;
  bool unsharded() const { return gathered_ != nullptr; }
  // Parameter i's full values in param_dtype; valid from the completion of
  // Unshard (synchronise its stream) until Reshard.
  absl::StatusOr<void*> FullParam(int i) const;
  // The caller must have synchronised the stream Unshard ran on and those
  // that read the parameters.
  absl::Status Reshard() { return ReshardAfter(nullptr); }
  // Returns the unsharded buffers once `stream` has run what is enqueued on
  // it so far (host: a HostStream*, nullptr now; CUDA: a cudaStream_t): the
  // schedule's form, where the gather and every use are ordered before it.
  absl::Status ReshardAfter(void* stream);

  // grads[i]: the full gradient of parameter i (count = numel, any float dtype).
  absl::Status ReduceGrads(absl::Span<const kernels::TensorRef> grads, void* stream);

  // The same from gradients the framework already laid out as the unsharded
  // buffer (full_numel() elements of reduce_dtype at full_offset(i), flat
  // layout): reduce-scattered in place, so no packed copy is made. The
  // padding is zeroed here; the buffer must stay untouched until the stream ran.
  absl::Status ReduceGradsFlat(void* grads, DataType t, void* stream);

  // Every rank: all-gathers the fp32 masters; out[i] (numel floats, all host
  // memory or all the group's) is written on `root`, or on every rank when
  // root < 0. Blocking. `shard` (shard_numel floats): gather it instead of the
  // master, for optimizer state shaped like it (Adam's moments).
  absl::Status GatherFull(int root, absl::Span<float* const> out, const float* shard = nullptr);
  // Inverse: root's full[i] become everyone's master shards (or `shard`). Blocking.
  absl::Status ScatterFull(int root, absl::Span<const float* const> full, float* shard = nullptr);

  MemoryReport memory() const;

 private:
  ShardGroup(Communicator* comm, Communicator* replicas, ShardLayout layout, const ShardGroupOptions& options,
             BufferPool* pool, std::shared_ptr<const MemoryOps> mem);
  // The communicator was told its buffers' kind (weftConfig_t.trust_memory):
  // the per-call checks classify no pointer.
  bool Trusted() const { return comm_->options().trust_memory; }
  // The shards and the group's own stream.
  absl::Status Allocate();
  // Returns `p` to the pool once `stream` has run what is enqueued so far.
  void PutAfter(void* p, void* stream);
  // Lays `srcs` (numel-sized tensors) out as the unsharded buffer `dst` (dst_t).
  // `mem` is the memory of `dst` (the group's, or the host for staging).
  absl::Status Pack(absl::Span<const kernels::TensorRef> srcs, void* dst, DataType dst_t, void* stream,
                    const MemoryOps& mem);
  // Reduce-scatter (or all-reduce) `buf`, the packed unsharded gradients in
  // reduce_dtype, across replicas too, and add this rank's slot to the shard.
  absl::Status ReducePacked(void* buf, void* stream);
  // Cast-copy the master into this rank's slot of `gathered`, all-gather;
  // per-parameter layout: split into `full`.
  absl::Status GatherInto(void* gathered, void* full, void* stream);
  // Zeroes the flat layout's padding of an unsharded buffer (on the stream).
  absl::Status ZeroPadding(void* unsharded, DataType t, void* stream, const MemoryOps& mem);
  // Inverse of Pack into full tensors.
  absl::Status Unpack(const void* src, DataType src_t, absl::Span<const kernels::TensorRef> dsts, void* stream);
  void* Slot(void* unsharded, DataType t) const;
  // Full-state helpers (shard_group_state.cc): unpack the gathered fp32
  // buffer `tmp` into `out`, or pack `full` into it, staging through host
  // memory when the tensors are on the host and the group on CUDA.
  absl::Status UnpackFull(const void* tmp, absl::Span<float* const> out, void* stream);
  absl::Status PackFull(absl::Span<const float* const> full, void* tmp, void* stream, std::vector<float>* staging);

  Communicator* const comm_;
  Communicator* const replicas_;
  const ShardLayout layout_;
  const std::vector<ParamShard> shards_;
  const ShardGroupOptions options_;
  BufferPool* const pool_;
  std::vector<size_t> chunk_counts_;  // per-parameter layout: elements per rank of each parameter
  const std::shared_ptr<const MemoryOps> mem_;
  void* own_stream_ = nullptr;  // the blocking steps' stream (host: nullptr, synchronous)
  float* master_ = nullptr;     // shard_numel floats each, in mem_
  float* grads_ = nullptr;
  void* gathered_ = nullptr;  // the all-gather output
  void* full_ = nullptr;      // per-parameter layout: the split full parameters
  std::vector<size_t> full_offsets_;
};

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_SHARD_GROUP_H_
