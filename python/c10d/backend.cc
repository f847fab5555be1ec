// WeftBackend: its lifetime, coalescing, and the all-to-all-ranks collectives;
// the rooted and point-to-point ones are in rooted.cc, WeftWork in work.cc.
//
// Every collective is built by an Op: it routes on the first tensor's device,
// checks the others against it, stages tensors weft cannot take as they are
// (non-contiguous ones, a list that must be one buffer) through contiguous
// temporaries, collects the weft calls, and issues them:
//  - host: on a host stream of the group's (one per collective in flight),
//    followed by a stream callback that copies results out of temporaries,
//    then completes the Work and its future, on the stream's thread (the
//    fewest hand-offs: the stream's thread is woken once, and it wakes the
//    waiter once, as gloo's worker threads do);
//  - CUDA: through CudaOrder on the communicator's stream, the copies out
//    enqueued behind the collective, the future completed in stream order.
// Between startCoalescing and endCoalescing the Ops share one Work, and their
// weft calls one weftGroupStart/weftGroupEnd (NCCL's group semantics).
#include "backend.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "op.h"

namespace weft_c10d {
namespace {

// The ranks on this node, as torchrun and the launchers built on it
// (LOCAL_WORLD_SIZE), Open MPI, MPICH, MVAPICH and Slurm say.
constexpr const char* kLocalSizeVars[] = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                          "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"};

// Whether the group's host streams run each collective on the CPU of the
// thread that issued it (weftStreamIssuerCpu): where a rank has no core to
// spare beyond its compute threads. A rank's share of cores is this
// process's CPUs over the node's ranks (the first of kLocalSizeVars set; 1
// where none is), its compute threads torch's intra-op threads. There its
// stream threads would otherwise take cores from the compute of whichever
// rank the scheduler put them beside, and two ranks' stream threads on one
// core make every shared-memory round between them a context switch: on 2
// vCPUs, 2 ranks, DDP's ResNet-50 step took 365 or 405 ms from one step to
// the next, and 356-373 ms following the issuer (bench/results/torch.md).
// WEFT_ISSUER_CPU=1 or 0 decides instead.
bool StreamsFollowIssuer() {
  if (const char* env = std::getenv("WEFT_ISSUER_CPU"); env != nullptr && *env != '\0') {
    const std::string v(env);
    TORCH_CHECK(v == "0" || v == "1", "weft: WEFT_ISSUER_CPU=", v, " (expected 1: host collectives run on the "
                "CPU of the thread that issued them, 0: wherever the scheduler puts them, or unset: decided by "
                "the cores per rank)");
    return v == "1";
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                                 : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  int local = 1;
  for (const char* name : kLocalSizeVars) {
    const char* env = std::getenv(name);
    const int n = env != nullptr ? std::atoi(env) : 0;
    if (n > 0) {
      local = n;
      break;
    }
  }
  return cpus / local < at::get_num_threads() + 1;
}

}  // namespace

WeftBackend::WeftBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), comms_(store, rank, size, timeout) {
  StreamsFollowIssuer();  // a bad WEFT_ISSUER_CPU fails the group's creation, not its first collective
}

WeftBackend::~WeftBackend() { shutdown(); }

void WeftBackend::DropRetired() {
  std::vector<c10::intrusive_ptr<WeftWork>> retired;  // dropped after the lock
  std::lock_guard<std::mutex> lock(mu_);
  retired.swap(retired_);
}

weftStream_t WeftBackend::LeaseStream() {
  DropRetired();
  std::lock_guard<std::mutex> lock(mu_);
  if (!free_streams_.empty()) {
    weftStream_t s = free_streams_.back();
    free_streams_.pop_back();
    return s;
  }
  // A blocking call's caller waits at once: it runs the collective itself
  // (WeftWork::wait) instead of waking the stream's thread and being woken.
  weftStream_t s = nullptr;
  if (stream_flags_ == 0) stream_flags_ = weftStreamWaitersRun | (StreamsFollowIssuer() ? weftStreamIssuerCpu : 0);
  weftResult_t r = weftStreamCreateWithFlags(&s, stream_flags_);
  TORCH_CHECK(r == weftSuccess, WeftError("weftStreamCreateWithFlags", getRank(), r));
  all_streams_.push_back(s);
  return s;
}

bool WeftBackend::PinStream(WeftWork& work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (work.released_ || work.backend_ == nullptr) return false;
  ++work.pins_;
  return true;
}

void WeftBackend::UnpinStream(WeftWork& work) {
  std::lock_guard<std::mutex> lock(mu_);
  if (--work.pins_ == 0 && work.released_) free_streams_.push_back(work.stream_);
}

void WeftBackend::Finish(const c10::intrusive_ptr<WeftWork>& work) {
  work->backend_ = this;
  WeftWork* w = work.get();
  work->release_ = [this, w](weftStream_t s, c10::intrusive_ptr<WeftWork> ref) {
    std::lock_guard<std::mutex> lock(mu_);
    w->released_ = true;
    if (w->pins_ == 0) free_streams_.push_back(s);  // else the last UnpinStream does
    if (ref && ref.use_count() == 1) retired_.push_back(std::move(ref));
  };
  // The callback owns a reference until it has run.
  c10::intrusive_ptr<WeftWork> ref = work;
  WeftWork* raw = ref.release();
  weftResult_t r = weftStreamAddCallback(work->stream_, &WeftWork::OnStreamDone, raw);
  if (r != weftSuccess) {
    // Not expected for a live stream; the work still completes, here.
    c10::intrusive_ptr<WeftWork>::reclaim(raw);
    std::string error = WeftError("weftStreamAddCallback", getRank(), r);
    weftStreamSynchronize(work->stream_);
    work->Complete(std::make_exception_ptr(
        c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, error)));
    work->release_(work->stream_, nullptr);
  }
}

CudaOrder& WeftBackend::Order(int device) {
  if (!order_) order_ = CudaOrder::Make(device);
  return *order_;
}

void WeftBackend::startCoalescing() {
  TORCH_CHECK(!coalescing_, "weft: startCoalescing on rank ", getRank(), " while already coalescing");
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> WeftBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "weft: endCoalescing on rank ", getRank(), " without startCoalescing");
  coalescing_ = false;
  c10::intrusive_ptr<WeftWork> work = std::move(group_);
  group_.reset();
  if (!work) {  // nothing was issued: a Work that is already done
    work = c10::make_intrusive<WeftWork>(getRank(), c10d::OpType::COALESCED, "coalesced collectives", false, nullptr);
    work->Complete(nullptr);
    return work;
  }
  work->open_ = false;
  weftResult_t r = EndGroup(*work);
  if (r != weftSuccess) {
    // weft issued the group's calls up to the refused one; they still read
    // the tensors the Work holds, so it completes (with its error) in the
    // background while the caller gets the exception.
    std::string error = WeftError(work->op_, getRank(), r);
    if (!work->cuda_) Finish(work);
    C10_THROW_ERROR(DistBackendError, error);
  }
  if (work->cuda_) {
    work->future_ = work->done_->Future(work->outputs_);
  } else {
    Finish(work);
  }
  return work;
}

// Ends the group's weft group, once: its sends and receives go out together
// (weftGroupEnd issues a group's sends first, so ranks that send to each
// other do not wait on each other). CUDA: the kernels are enqueued only now,
// so the Work's end and the copies out of temporaries go behind them.
weftResult_t WeftBackend::EndGroup(WeftWork& work) {
  if (!work.grouped_) return weftSuccess;
  work.grouped_ = false;
  weftResult_t r = weftGroupEnd();
  if (work.cuda_) {
    std::vector<std::function<void()>> post = std::move(work.post_);
    work.post_.clear();
    work.done_ = Order(work.device_).Run([&](void*) {
      for (auto& f : post) f();
    }, work.keep_);
  }
  return r;
}

// A call refused inside a coalesced group ends it: what joined the weft
// group is issued (as it would have been outside one) and completes in the
// background, and later calls are not coalesced.
void WeftBackend::AbandonGroup() {
  coalescing_ = false;
  c10::intrusive_ptr<WeftWork> work = std::move(group_);
  group_.reset();
  if (!work) return;
  work->open_ = false;
  EndGroup(*work);
  if (!work->cuda_) Finish(work);
}

// ---------------------------------------------------------------- collectives

namespace {

void AddAllReduce(Op& op, const at::Tensor& t, const c10d::ReduceOp& rop) {
  const Typed ty = ReducedAs(op.name(), t);
  const weftRedOp_t wop = WeftOp(op.name(), rop, t);
  at::Tensor buf = op.Out(t, /*read=*/true);
  if (rop.op_ == c10d::ReduceOp::PREMUL_SUM) {
    at::Tensor scaled = op.Premul(buf, rop);
    op.Keep(scaled);
    op.Call([scaled, buf, ty, wop](weftComm_t c, void* s) {
      return weftAllReduce(scaled.data_ptr(), buf.data_ptr(), Count(buf, ty), ty.dtype, wop, c, s);
    });
    return;
  }
  op.Call([buf, ty, wop](weftComm_t c, void* s) {
    return weftAllReduce(buf.data_ptr(), buf.data_ptr(), Count(buf, ty), ty.dtype, wop, c, s);
  });
}

void AddAllGather(Op& op, const at::Tensor& output, const at::Tensor& input) {
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "weft: ", op.name(), ": output ",
                    output.scalar_type(), ", input ", input.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * op.size(), "weft: ", op.name(), ": output has ",
                    output.numel(), " elements, not the group size ", op.size(), " times the input's ", input.numel());
  const Typed ty = MovedAs(input);
  at::Tensor in = op.In(input);
  at::Tensor out = op.Out(output, /*read=*/false);
  op.Call([in, out, ty](weftComm_t c, void* s) {
    return weftAllGather(in.data_ptr(), out.data_ptr(), Count(in, ty), ty.dtype, c, s);
  });
}

void AddReduceScatter(Op& op, const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& rop) {
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "weft: ", op.name(), ": output ",
                    output.scalar_type(), ", input ", input.scalar_type());
  TORCH_CHECK_VALUE(input.numel() == output.numel() * op.size(), "weft: ", op.name(), ": input has ",
                    input.numel(), " elements, not the group size ", op.size(), " times the output's ", output.numel());
  const Typed ty = ReducedAs(op.name(), input);
  const weftRedOp_t wop = WeftOp(op.name(), rop, input);
  at::Tensor in = op.In(input);
  if (rop.op_ == c10d::ReduceOp::PREMUL_SUM) {
    in = op.Premul(in, rop);
    op.Keep(in);
  }
  at::Tensor out = op.Out(output, /*read=*/false);
  op.Call([in, out, ty, wop](weftComm_t c, void* s) {
    return weftReduceScatter(in.data_ptr(), out.data_ptr(), Count(out, ty), ty.dtype, wop, c, s);
  });
}

// Uneven lists (all_gather's, reduce_scatter's) need the same block sizes on
// every rank. weft's own check of each call's count catches lists whose
// largest blocks differ, but not lists that differ only below the largest:
// a rank would read another's padding as data. On host tensors a 16-byte
// all-reduce of a hash of the sizes goes first, and the Work fails, naming
// this rank's sizes, where the ranks disagree. (On CUDA tensors the caller
// must pass the same lists, as on NCCL: checking there would stall the host.)
void CheckSameSizes(Op& op, const std::vector<at::Tensor>& list) {
  if (op.cuda()) return;
  uint64_t h = 14695981039346656037ull;  // FNV-1a over the sizes
  std::string sizes;
  for (const auto& t : list) {
    h = (h ^ static_cast<uint64_t>(t.numel())) * 1099511628211ull;
    sizes += (sizes.empty() ? "" : ", ") + std::to_string(t.numel());
  }
  const int64_t mine = static_cast<int64_t>(h >> 2);  // so that -mine is one too
  at::Tensor sig = at::tensor({mine, -mine}, at::kLong);
  op.Keep(sig);
  op.Call([sig](weftComm_t c, void* s) {
    return weftAllReduce(sig.data_ptr(), sig.data_ptr(), 2, weftInt64, weftMax, c, s);
  });
  op.Post([sig, mine, sizes, name = op.name(), rank = op.rank()]() {
    const int64_t* v = sig.data_ptr<int64_t>();
    if (v[0] != mine || v[1] != -mine) {  // someone's hash is above or below this rank's
      C10_THROW_ERROR(DistBackendError, "weft: " + std::string(name) + " on rank " + std::to_string(rank) +
                      ": the ranks passed different lists of block sizes (this rank's: " + sizes + ")");
    }
  });
}

}  // namespace

c10::intrusive_ptr<c10d::Work> WeftBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = One("all_reduce", tensors);
  if (t.is_sparse()) return SparseAllReduce(tensors[0], opts.reduceOp);
  Op op(*this, "all_reduce", c10d::OpType::ALLREDUCE, t);
  AddAllReduce(op, t, opts.reduceOp);
  return op.Issue(tensors, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "weft: all_reduce_coalesced of no tensors");
  Op op(*this, "all_reduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors[0]);
  for (const auto& t : tensors) AddAllReduce(op, t, opts.reduceOp);
  return op.Issue(tensors, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = One("broadcast", tensors);
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "weft: broadcast: rootTensor ", opts.rootTensor, " (one tensor per rank)");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "weft: broadcast: root ", opts.rootRank,
                    " is outside the group of ", getSize());
  Op op(*this, "broadcast", c10d::OpType::BROADCAST, t);
  const Typed ty = MovedAs(t);
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor buf = op.Out(t, /*read=*/true);
  op.Call([buf, ty, root](weftComm_t c, void* s) {
    return weftBroadcast(buf.data_ptr(), buf.data_ptr(), Count(buf, ty), ty.dtype, root, c, s);
  });
  return op.Issue(tensors, opts.asyncOp);
}

// The list form. Blocks may differ in size from rank to rank, as torch's NCCL
// backend allows (every rank passes the same list of sizes, and its input is
// its own block's size): they then travel as one even all-gather of blocks
// as large as the largest, each rank's padded, rather than one broadcast per
// rank, which would pay the group's latency once per rank.
c10::intrusive_ptr<c10d::Work> WeftBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions& opts) {
  const at::Tensor& input = One("all_gather", inputs);
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), "weft: all_gather: "
                    "the output list must hold one tensor per rank of the group (", getSize(), ")");
  Op op(*this, "all_gather", c10d::OpType::ALLGATHER, input);
  std::vector<at::Tensor> list = outputs[0];
  const int64_t n = input.numel();
  int64_t most = 0;
  bool even = true;
  for (const auto& o : list) {
    TORCH_CHECK_VALUE(o.scalar_type() == input.scalar_type(), "weft: all_gather: an output of ", o.scalar_type(),
                      " for an input of ", input.scalar_type());
    op.Keep(o);
    most = std::max(most, o.numel());
    even = even && o.numel() == n;
  }
  TORCH_CHECK_VALUE(list[getRank()].numel() == n, "weft: all_gather: rank ", getRank(), "'s output holds ",
                    list[getRank()].numel(), " elements for its input of ", n);
  if (!even) CheckSameSizes(op, list);
  at::Tensor block = input;
  if (most != n) {
    block = at::empty({most}, input.options().memory_format(at::MemoryFormat::Contiguous));
    block.narrow(0, 0, n).copy_(input.reshape({-1}));
  }
  // weft gathers into one buffer; the list's tensors are filled from it.
  at::Tensor flat = at::empty({most * getSize()}, input.options().memory_format(at::MemoryFormat::Contiguous));
  AddAllGather(op, flat, block);
  op.Post([list, flat, most]() mutable {
    for (size_t i = 0; i < list.size(); ++i) {
      list[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * most, list[i].numel()).view(list[i].sizes()));
    }
  });
  return op.Issue(list, opts.asyncOp);
}

// torch's all_gather_coalesced: outputs[r][i] gets rank r's inputs[i]. The
// inputs go as one flat buffer (one all-gather, as gloo sends them), so they
// share a dtype, as gloo requires.
c10::intrusive_ptr<c10d::Work> WeftBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(!inputs.empty(), "weft: all_gather_coalesced of no tensors");
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == getSize(), "weft: all_gather_coalesced: ", outputs.size(),
                    " output lists for a group of ", getSize(), " (one list per rank)");
  Op op(*this, "all_gather_coalesced", c10d::OpType::ALLGATHER_COALESCED, inputs[0]);
  std::vector<at::Tensor> flat_inputs;
  int64_t total = 0;
  for (const auto& t : inputs) {
    TORCH_CHECK_VALUE(t.scalar_type() == inputs[0].scalar_type(), "weft: all_gather_coalesced: an input of ",
                      t.scalar_type(), " beside one of ", inputs[0].scalar_type(), "; the inputs share one dtype");
    flat_inputs.push_back(op.In(t).reshape({-1}));
    total += t.numel();
  }
  for (size_t r = 0; r < outputs.size(); ++r) {
    TORCH_CHECK_VALUE(outputs[r].size() == inputs.size(), "weft: all_gather_coalesced: output list ", r, " holds ",
                      outputs[r].size(), " tensors for ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& o = outputs[r][i];
      TORCH_CHECK_VALUE(o.numel() == inputs[i].numel() && o.scalar_type() == inputs[i].scalar_type() &&
                        o.device() == inputs[i].device(), "weft: all_gather_coalesced: output [", r, "][", i,
                        "] is ", o.numel(), " ", o.scalar_type(), " on ", o.device(), " for an input of ",
                        inputs[i].numel(), " ", inputs[i].scalar_type(), " on ", inputs[i].device());
      op.Keep(o);
    }
  }
  at::Tensor flat = at::empty({total * getSize()}, inputs[0].options().memory_format(at::MemoryFormat::Contiguous));
  AddAllGather(op, flat, at::cat(flat_inputs));
  op.Post([outputs, flat, total]() mutable {
    for (size_t r = 0; r < outputs.size(); ++r) {
      int64_t off = static_cast<int64_t>(r) * total;
      for (at::Tensor& o : outputs[r]) {
        o.copy_(flat.narrow(0, off, o.numel()).view(o.sizes()));
        off += o.numel();
      }
    }
  });
  std::vector<at::Tensor> all;
  for (const auto& list : outputs) all.insert(all.end(), list.begin(), list.end());
  return op.Issue(all, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                            const c10d::AllgatherOptions& opts) {
  Op op(*this, "all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, input);
  AddAllGather(op, output, input);
  return op.Issue({output}, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                            std::vector<at::Tensor>& inputs,
                                                                            const c10d::AllgatherOptions& opts) {
  TORCH_CHECK_VALUE(!inputs.empty() && inputs.size() == outputs.size(), "weft: allgather_into_tensor_coalesced: ",
                    inputs.size(), " inputs and ", outputs.size(), " outputs");
  Op op(*this, "allgather_into_tensor_coalesced", c10d::OpType::COALESCED, inputs[0]);
  for (size_t i = 0; i < inputs.size(); ++i) AddAllGather(op, outputs[i], inputs[i]);
  return op.Issue(outputs, opts.asyncOp);
}

// The list form. As all_gather's list, blocks may differ in size from rank to
// rank (this rank's output is its own block's size): they are then reduced as
// one even reduce-scatter of blocks as large as the largest, zero-padded.
c10::intrusive_ptr<c10d::Work> WeftBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = One("reduce_scatter", outputs);
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), "weft: reduce_scatter: "
                    "the input list must hold one tensor per rank of the group (", getSize(), ")");
  Op op(*this, "reduce_scatter", c10d::OpType::REDUCE_SCATTER, output);
  const std::vector<at::Tensor>& list = inputs[0];
  int64_t most = 0;
  bool even = true;
  for (const auto& t : list) {
    even = even && t.numel() == output.numel();
    TORCH_CHECK_VALUE(t.scalar_type() == output.scalar_type(), "weft: reduce_scatter: an input of ",
                      t.scalar_type(), " for an output of ", output.scalar_type());
    TORCH_CHECK_VALUE(t.device() == output.device(), "weft: reduce_scatter: an input on ", t.device(),
                      " for an output on ", output.device());
    most = std::max(most, t.numel());
  }
  TORCH_CHECK_VALUE(list[getRank()].numel() == output.numel(), "weft: reduce_scatter: rank ", getRank(),
                    "'s input block holds ", list[getRank()].numel(), " elements for its output of ", output.numel());
  // weft reduces one buffer of every rank's block; the list is packed into it.
  at::Tensor flat;
  at::Tensor block = output;
  if (even) {
    std::vector<at::Tensor> parts;
    for (const auto& t : list) parts.push_back(t.reshape({-1}));
    flat = at::cat(parts);
  } else {
    CheckSameSizes(op, list);
    flat = at::zeros({most * getSize()}, output.options().memory_format(at::MemoryFormat::Contiguous));
    for (size_t r = 0; r < list.size(); ++r) {
      flat.narrow(0, static_cast<int64_t>(r) * most, list[r].numel()).copy_(list[r].reshape({-1}));
    }
    block = at::empty({most}, flat.options());
    op.Keep(output);
    at::Tensor out = output;
    op.Post([out, block]() mutable { out.copy_(block.narrow(0, 0, out.numel()).view(out.sizes())); });
  }
  AddReduceScatter(op, block, flat, opts.reduceOp);
  return op.Issue(outputs, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::ReduceScatterOptions& opts) {
  Op op(*this, "reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, input);
  AddReduceScatter(op, output, input, opts.reduceOp);
  return op.Issue({output}, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                            std::vector<at::Tensor>& inputs,
                                                                            const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(!inputs.empty() && inputs.size() == outputs.size(), "weft: reduce_scatter_tensor_coalesced: ",
                    inputs.size(), " inputs and ", outputs.size(), " outputs");
  Op op(*this, "reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED, inputs[0]);
  for (size_t i = 0; i < inputs.size(); ++i) AddReduceScatter(op, outputs[i], inputs[i], opts.reduceOp);
  return op.Issue(outputs, opts.asyncOp);
}

// weftBarrier is a host collective that blocks: it waits behind every
// collective issued on the host communicator before it, as issue order says.
c10::intrusive_ptr<c10d::Work> WeftBackend::barrier(const c10d::BarrierOptions&) {
  weftComm_t comm = comms_.Host();
  TORCH_CHECK(comm != nullptr, "weft: barrier on rank ", getRank(), ": the process group was shut down");
  ++seq_;
  weftResult_t r = weftBarrier(comm);
  if (r != weftSuccess) C10_THROW_ERROR(DistBackendError, WeftError("barrier", getRank(), r));
  auto work = c10::make_intrusive<WeftWork>(getRank(), c10d::OpType::BARRIER, "barrier", false, comm);
  work->Complete(nullptr);
  return work;
}


void WeftBackend::abort() { comms_.Abort(); }

void WeftBackend::shutdown() {
  std::vector<weftStream_t> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_) return;
    shut_ = true;
    streams = all_streams_;
  }
  // Every issued host collective has completed once its stream has
  // (callbacks included); not under mu_, which the callbacks take.
  for (weftStream_t s : streams) weftStreamDestroy(s);
  std::vector<c10::intrusive_ptr<WeftWork>> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all_streams_.clear();
    free_streams_.clear();
    retired.swap(retired_);
  }
  retired.clear();
  order_.reset();
  comms_.Destroy();
}


}  // namespace weft_c10d
