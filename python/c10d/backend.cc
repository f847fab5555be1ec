// WeftBackend and WeftWork: torch's collectives as weft C ABI calls.
//
// Every collective is built by an Op: it routes on the first tensor's device,
// checks the others against it, stages tensors weft cannot take as they are
// (non-contiguous ones, a list that must be one buffer) through contiguous
// temporaries, collects the weft calls, and issues them:
//  - host: on a host stream of the group's (one per collective in flight), the
//    Work handed to the completion thread, which synchronises the stream,
//    copies results out of temporaries, then completes the Work and future;
//  - CUDA: through CudaOrder on the communicator's stream, the copies out
//    enqueued behind the collective, the future completed in stream order.
// Between startCoalescing and endCoalescing the Ops share one Work, and their
// weft calls one weftGroupStart/weftGroupEnd (NCCL's group semantics).
#include "backend.h"

#include <c10/util/Exception.h>

namespace weft_c10d {

namespace {

weftDataType_t WeftType(const char* op, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return weftFloat32;
    case at::kDouble: return weftFloat64;
    case at::kBFloat16: return weftBfloat16;
    case at::kHalf: return weftFloat16;
    case at::kChar: return weftInt8;
    case at::kByte: return weftUint8;
    case at::kBool: return weftUint8;  // one byte, 0 or 1; the ops are mapped so it stays so
    case at::kInt: return weftInt32;
    case at::kLong: return weftInt64;
    default:
      TORCH_CHECK_TYPE(false, "weft: ", op, ": dtype ", t.scalar_type(), " is not a weft type (float32/64, "
                       "bfloat16, float16, int8, uint8, int32, int64, bool); convert the tensor first");
  }
}

// The weft reduction for torch's; PREMUL_SUM is SUM after the Op scaled its
// input. On bool (bytes 0 or 1) SUM is logical or, as gloo computes it: MAX.
weftRedOp_t WeftOp(const char* op, const c10d::ReduceOp& rop, const at::Tensor& t) {
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (rop.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM: return is_bool ? weftMax : weftSum;
    case c10d::ReduceOp::PRODUCT: return weftProd;
    case c10d::ReduceOp::MIN: return weftMin;
    case c10d::ReduceOp::MAX: return weftMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_VALUE(!is_bool, "weft: ", op, ": ReduceOp.AVG of a bool tensor has no bool result");
      return weftAvg;
    default:
      TORCH_CHECK_VALUE(false, "weft: ", op, ": ReduceOp ", static_cast<int>(rop.op_), " (BAND/BOR/BXOR) is not "
                        "a weft reduction; weft has SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM");
  }
}

}  // namespace

// ---------------------------------------------------------------- WeftWork

WeftWork::WeftWork(int rank, c10d::OpType type, const char* op, bool cuda, weftComm_t comm)
    : c10d::Work(rank, type), op_(op), cuda_(cuda), comm_(comm) {
  // Host work: completed by Drain. CUDA work: made by CudaDone, in stream order.
  if (!cuda_) future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

bool WeftWork::isCompleted() {
  if (cuda_) return done_ && done_->Query();
  return c10d::Work::isCompleted();
}

bool WeftWork::isSuccess() const {
  if (cuda_) return true;  // device failures surface in wait(), from the communicator
  return c10d::Work::isSuccess();
}

bool WeftWork::wait(std::chrono::milliseconds timeout) {
  TORCH_CHECK(!open_, "weft: rank ", rank_, ": wait() on a collective of a coalesced group before endCoalescing "
              "(wait for the Work endCoalescing returns)");
  if (!cuda_) {
    if (timeout == ::kNoTimeout && stream_ != nullptr) Drain();
    return c10d::Work::wait(timeout);
  }
  synchronize();
  return true;
}

void WeftWork::synchronize() {
  if (!cuda_ || !done_) return;
  done_->BlockCurrentStream();
  weftResult_t async = weftSuccess;
  weftCommGetAsyncError(comm_, &async);
  if (async != weftSuccess) C10_THROW_ERROR(DistBackendError, WeftError(op_, rank_, async));
}

c10::intrusive_ptr<c10::ivalue::Future> WeftWork::getFuture() { return future_; }

std::vector<at::Tensor> WeftWork::result() { return outputs_; }

void WeftWork::Drain() {
  std::lock_guard<std::mutex> lock(drain_mu_);
  if (drained_) return;
  drained_ = true;
  weftResult_t r = weftStreamSynchronize(stream_);
  std::exception_ptr error;
  if (r != weftSuccess) {  // this thread's last error is that synchronisation's
    error = std::make_exception_ptr(
        c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, WeftError(op_, rank_, r)));
  }
  release_(stream_);
  Complete(error);
}

void WeftWork::Complete(std::exception_ptr error) {
  if (!error) {
    try {
      for (auto& f : post_) f();
    } catch (...) {
      error = std::current_exception();
    }
  }
  post_.clear();
  keep_.clear();
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

// ---------------------------------------------------------------- Op

// One collective being built (see the top of the file).
class Op {
 public:
  Op(WeftBackend& b, const char* name, c10d::OpType type, const at::Tensor& first) : b_(b), name_(name), type_(type) {
    TORCH_CHECK_VALUE(first.device().is_cpu() || first.device().is_cuda(), "weft: ", name_, ": a tensor on ",
                      first.device(), "; weft's backend takes cpu and cuda tensors");
    device_ = first.device();
    cuda_ = device_.is_cuda();
    comm_ = cuda_ ? b_.comms_.Cuda(device_.index()) : b_.comms_.Host();
    TORCH_CHECK(comm_ != nullptr, "weft: ", name_, " on rank ", b_.getRank(), ": the process group was shut down");
  }

  // A tensor weft reads: itself when contiguous, else a contiguous copy.
  at::Tensor In(const at::Tensor& t) {
    Check(t);
    at::Tensor c = t.contiguous();
    keep_.push_back(c);
    return c;
  }
  // A tensor weft writes: itself when contiguous, else a temporary copied
  // back once the data is there. `read`: weft also reads it (in place).
  at::Tensor Out(const at::Tensor& t, bool read) {
    Check(t);
    if (t.is_contiguous()) {
      keep_.push_back(t);
      return t;
    }
    at::Tensor c = read ? t.contiguous() : at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
    keep_.push_back(t);
    keep_.push_back(c);
    Post([t, c]() mutable { t.copy_(c); });
    return c;
  }
  void Keep(const at::Tensor& t) { keep_.push_back(t); }
  void Post(std::function<void()> f) {
    if (cuda_) {
      cuda_post_.push_back(std::move(f));
    } else {
      post_.push_back(std::move(f));
    }
  }
  void Call(std::function<weftResult_t(weftComm_t, void*)> f) { calls_.push_back(std::move(f)); }

  // PREMUL_SUM's input: the tensor times the op's factor, in its own dtype.
  at::Tensor Premul(const at::Tensor& t, const c10d::ReduceOp& rop) {
    if (rop.op_ != c10d::ReduceOp::PREMUL_SUM) return t;
    TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), "weft: ", name_, ": PREMUL_SUM of ", t.scalar_type());
    auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
    TORCH_CHECK_VALUE(s != nullptr, "weft: ", name_, ": PREMUL_SUM without its factor");
    if (s->tensor_factor.defined()) return at::mul(t, s->tensor_factor.reshape({}).to(t.device(), t.scalar_type()));
    return at::mul(t, s->double_factor);
  }

  c10::intrusive_ptr<c10d::Work> Issue(std::vector<at::Tensor> outputs);

  const char* name() const { return name_; }
  int rank() const { return b_.getRank(); }
  int size() const { return b_.getSize(); }

 private:
  void Check(const at::Tensor& t) {
    TORCH_CHECK_VALUE(t.device() == device_, "weft: ", name_, ": a tensor on ", t.device(), " beside one on ",
                      device_, "; every tensor of a collective must be on one device");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "weft: ", name_, ": a ", t.layout(), " tensor; weft takes "
                      "dense (strided) tensors");
  }
  void Launch(weftStream_t stream, void* cuda_stream);

  WeftBackend& b_;
  const char* name_;
  c10d::OpType type_;
  at::Device device_{at::kCPU};
  bool cuda_ = false;
  weftComm_t comm_ = nullptr;
  std::vector<at::Tensor> keep_;
  std::vector<std::function<void()>> post_;
  std::vector<std::function<void()>> cuda_post_;
  std::vector<std::function<weftResult_t(weftComm_t, void*)>> calls_;
};

c10::intrusive_ptr<c10d::Work> Op::Issue(std::vector<at::Tensor> outputs) {
  ++b_.seq_;
  c10::intrusive_ptr<WeftWork> work;
  if (b_.coalescing_) {
    if (!b_.group_) {
      b_.group_ = c10::make_intrusive<WeftWork>(rank(), c10d::OpType::COALESCED, "coalesced collectives", cuda_, comm_);
      b_.group_->open_ = true;
      if (!cuda_) b_.group_->stream_ = b_.LeaseStream();
    }
    work = b_.group_;
    TORCH_CHECK_VALUE(work->cuda_ == cuda_ && work->comm_ == comm_, "weft: ", name_, ": a coalesced group on ",
                      work->cuda_ ? "cuda" : "cpu", " cannot take a tensor on ", device_);
    if (!work->grouped_) {
      // After the communicator exists (a CUDA one is made by the group's
      // first call, which must not be inside a weft group).
      weftResult_t r = weftGroupStart();
      if (r != weftSuccess) C10_THROW_ERROR(DistBackendError, WeftError("weftGroupStart", rank(), r));
      work->grouped_ = true;
      work->device_ = device_.index();
    }
  } else {
    work = c10::make_intrusive<WeftWork>(rank(), type_, name_, cuda_, comm_);
    if (!cuda_) work->stream_ = b_.LeaseStream();
  }
  if (cuda_) {
    std::string error;
    work->done_ = b_.Order(device_.index()).Run([&](void* stream) {
      for (auto& call : calls_) {
        weftResult_t r = call(comm_, stream);
        if (r != weftSuccess) {
          error = WeftError(name_, rank(), r);
          return;
        }
      }
      if (b_.coalescing_) return;  // inside a weft group nothing is enqueued before weftGroupEnd
      for (auto& f : cuda_post_) f();  // on the communicator's stream, behind the collective
    }, keep_);
    for (auto& t : keep_) work->keep_.push_back(t);  // the caching allocator holds them until the stream is done
    if (b_.coalescing_) {
      for (auto& f : cuda_post_) work->post_.push_back(std::move(f));
    }
    if (!error.empty()) {
      if (b_.coalescing_) b_.AbandonGroup();
      C10_THROW_ERROR(DistBackendError, error);
    }
  } else {
    for (auto& call : calls_) {
      weftResult_t r = call(comm_, work->stream_);
      if (r != weftSuccess) {
        // Refused at issue (the arguments): what this Op already enqueued
        // still reads its tensors, so let it finish before they may go.
        std::string error = WeftError(name_, rank(), r);
        if (b_.coalescing_) {
          for (auto& t : keep_) work->keep_.push_back(std::move(t));
          b_.AbandonGroup();
        } else {
          weftStreamSynchronize(work->stream_);
          std::lock_guard<std::mutex> lock(b_.mu_);
          b_.free_streams_.push_back(work->stream_);
        }
        C10_THROW_ERROR(DistBackendError, error);
      }
    }
    for (auto& t : keep_) work->keep_.push_back(std::move(t));
    for (auto& f : post_) work->post_.push_back(std::move(f));
  }
  for (auto& t : outputs) work->outputs_.push_back(t);
  if (b_.coalescing_) return work;
  if (cuda_) {
    work->future_ = work->done_->Future(work->outputs_);
  } else {
    b_.Finish(work);
  }
  return work;
}

// ---------------------------------------------------------------- WeftBackend

WeftBackend::WeftBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), comms_(store, rank, size, timeout) {
  completion_ = std::thread([this] { CompletionLoop(); });
}

WeftBackend::~WeftBackend() { shutdown(); }

weftStream_t WeftBackend::LeaseStream() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!free_streams_.empty()) {
    weftStream_t s = free_streams_.back();
    free_streams_.pop_back();
    return s;
  }
  weftStream_t s = nullptr;
  weftResult_t r = weftStreamCreate(&s);
  TORCH_CHECK(r == weftSuccess, WeftError("weftStreamCreate", getRank(), r));
  all_streams_.push_back(s);
  return s;
}

void WeftBackend::Finish(const c10::intrusive_ptr<WeftWork>& work) {
  work->release_ = [this](weftStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    free_streams_.push_back(s);
  };
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(work);
  cv_.notify_one();
}

// Host work completes in issue order (collectives on one communicator run
// in that order), so synchronising each stream in turn completes each Work
// as soon as its collective is done, with that collective's own error (or
// finds it already drained by a thread in wait()).
void WeftBackend::CompletionLoop() {
  for (;;) {
    c10::intrusive_ptr<WeftWork> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;
      work = std::move(pending_.front());
      pending_.pop_front();
    }
    work->Drain();
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

const at::Tensor& One(const char* op, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "weft: ", op, ": ", tensors.size(), " tensors; weft takes one per "
                    "process (one device per rank)");
  return tensors[0];
}

size_t Count(const at::Tensor& t) { return static_cast<size_t>(t.numel()); }

void AddAllReduce(Op& op, const at::Tensor& t, const c10d::ReduceOp& rop) {
  const weftDataType_t dt = WeftType(op.name(), t);
  const weftRedOp_t wop = WeftOp(op.name(), rop, t);
  at::Tensor buf = op.Out(t, /*read=*/true);
  if (rop.op_ == c10d::ReduceOp::PREMUL_SUM) {
    at::Tensor scaled = op.Premul(buf, rop);
    op.Keep(scaled);
    op.Call([scaled, buf, dt, wop](weftComm_t c, void* s) {
      return weftAllReduce(scaled.data_ptr(), buf.data_ptr(), Count(buf), dt, wop, c, s);
    });
    return;
  }
  op.Call([buf, dt, wop](weftComm_t c, void* s) {
    return weftAllReduce(buf.data_ptr(), buf.data_ptr(), Count(buf), dt, wop, c, s);
  });
}

void AddAllGather(Op& op, const at::Tensor& output, const at::Tensor& input) {
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "weft: ", op.name(), ": output ",
                    output.scalar_type(), ", input ", input.scalar_type());
  TORCH_CHECK_VALUE(output.numel() == input.numel() * op.size(), "weft: ", op.name(), ": output has ",
                    output.numel(), " elements, not the group size ", op.size(), " times the input's ", input.numel());
  const weftDataType_t dt = WeftType(op.name(), input);
  at::Tensor in = op.In(input);
  at::Tensor out = op.Out(output, /*read=*/false);
  op.Call([in, out, dt](weftComm_t c, void* s) {
    return weftAllGather(in.data_ptr(), out.data_ptr(), Count(in), dt, c, s);
  });
}

void AddReduceScatter(Op& op, const at::Tensor& output, const at::Tensor& input, const c10d::ReduceOp& rop) {
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "weft: ", op.name(), ": output ",
                    output.scalar_type(), ", input ", input.scalar_type());
  TORCH_CHECK_VALUE(input.numel() == output.numel() * op.size(), "weft: ", op.name(), ": input has ",
                    input.numel(), " elements, not the group size ", op.size(), " times the output's ", output.numel());
  const weftDataType_t dt = WeftType(op.name(), input);
  const weftRedOp_t wop = WeftOp(op.name(), rop, input);
  at::Tensor in = op.In(input);
  if (rop.op_ == c10d::ReduceOp::PREMUL_SUM) {
    in = op.Premul(in, rop);
    op.Keep(in);
  }
  at::Tensor out = op.Out(output, /*read=*/false);
  op.Call([in, out, dt, wop](weftComm_t c, void* s) {
    return weftReduceScatter(in.data_ptr(), out.data_ptr(), Count(out), dt, wop, c, s);
  });
}

}  // namespace

c10::intrusive_ptr<c10d::Work> WeftBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = One("all_reduce", tensors);
  Op op(*this, "all_reduce", c10d::OpType::ALLREDUCE, t);
  AddAllReduce(op, t, opts.reduceOp);
  return op.Issue(tensors);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK_VALUE(!tensors.empty(), "weft: all_reduce_coalesced of no tensors");
  Op op(*this, "all_reduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors[0]);
  for (const auto& t : tensors) AddAllReduce(op, t, opts.reduceOp);
  return op.Issue(tensors);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = One("broadcast", tensors);
  TORCH_CHECK_VALUE(opts.rootTensor == 0, "weft: broadcast: rootTensor ", opts.rootTensor, " (one tensor per rank)");
  TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < getSize(), "weft: broadcast: root ", opts.rootRank,
                    " is outside the group of ", getSize());
  Op op(*this, "broadcast", c10d::OpType::BROADCAST, t);
  const weftDataType_t dt = WeftType(op.name(), t);
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor buf = op.Out(t, /*read=*/true);
  op.Call([buf, dt, root](weftComm_t c, void* s) {
    return weftBroadcast(buf.data_ptr(), buf.data_ptr(), Count(buf), dt, root, c, s);
  });
  return op.Issue(tensors);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions&) {
  const at::Tensor& input = One("all_gather", inputs);
  TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), "weft: all_gather: "
                    "the output list must hold one tensor per rank of the group (", getSize(), ")");
  Op op(*this, "all_gather", c10d::OpType::ALLGATHER, input);
  for (const auto& o : outputs[0]) {
    TORCH_CHECK_VALUE(o.numel() == input.numel() && o.scalar_type() == input.scalar_type(), "weft: all_gather: "
                      "an output of ", o.numel(), " ", o.scalar_type(), " for an input of ", input.numel(), " ",
                      input.scalar_type());
    op.Keep(o);
  }
  // weft gathers into one buffer; the list's tensors are filled from it.
  at::Tensor flat = at::empty({input.numel() * getSize()}, input.options().memory_format(at::MemoryFormat::Contiguous));
  AddAllGather(op, flat, input);
  std::vector<at::Tensor> list = outputs[0];
  const int64_t n = input.numel();
  op.Post([list, flat, n]() mutable {
    for (size_t i = 0; i < list.size(); ++i) list[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(list[i].sizes()));
  });
  return op.Issue(outputs[0]);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                            const c10d::AllgatherOptions&) {
  Op op(*this, "all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, input);
  AddAllGather(op, output, input);
  return op.Issue({output});
}

c10::intrusive_ptr<c10d::Work> WeftBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                            std::vector<at::Tensor>& inputs,
                                                                            const c10d::AllgatherOptions&) {
  TORCH_CHECK_VALUE(!inputs.empty() && inputs.size() == outputs.size(), "weft: allgather_into_tensor_coalesced: ",
                    inputs.size(), " inputs and ", outputs.size(), " outputs");
  Op op(*this, "allgather_into_tensor_coalesced", c10d::OpType::COALESCED, inputs[0]);
  for (size_t i = 0; i < inputs.size(); ++i) AddAllGather(op, outputs[i], inputs[i]);
  return op.Issue(outputs);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = One("reduce_scatter", outputs);
  TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), "weft: reduce_scatter: "
                    "the input list must hold one tensor per rank of the group (", getSize(), ")");
  Op op(*this, "reduce_scatter", c10d::OpType::REDUCE_SCATTER, output);
  std::vector<at::Tensor> flat_parts;
  for (const auto& t : inputs[0]) {
    TORCH_CHECK_VALUE(t.numel() == output.numel() && t.scalar_type() == output.scalar_type(), "weft: "
                      "reduce_scatter: an input of ", t.numel(), " ", t.scalar_type(), " for an output of ",
                      output.numel(), " ", output.scalar_type());
    TORCH_CHECK_VALUE(t.device() == output.device(), "weft: reduce_scatter: an input on ", t.device(),
                      " for an output on ", output.device());
    flat_parts.push_back(t.reshape({-1}));
  }
  // weft reduces one buffer of every rank's block; the list is packed into it.
  at::Tensor flat = at::cat(flat_parts);
  AddReduceScatter(op, output, flat, opts.reduceOp);
  return op.Issue(outputs);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::ReduceScatterOptions& opts) {
  Op op(*this, "reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE, input);
  AddReduceScatter(op, output, input, opts.reduceOp);
  return op.Issue({output});
}

c10::intrusive_ptr<c10d::Work> WeftBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                            std::vector<at::Tensor>& inputs,
                                                                            const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK_VALUE(!inputs.empty() && inputs.size() == outputs.size(), "weft: reduce_scatter_tensor_coalesced: ",
                    inputs.size(), " inputs and ", outputs.size(), " outputs");
  Op op(*this, "reduce_scatter_tensor_coalesced", c10d::OpType::COALESCED, inputs[0]);
  for (size_t i = 0; i < inputs.size(); ++i) AddReduceScatter(op, outputs[i], inputs[i], opts.reduceOp);
  return op.Issue(outputs);
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

// ---------------------------------------------------------------- rooted, all-to-all, point-to-point

namespace {

int Root(const char* op, int64_t root, int size) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "weft: ", op, ": root ", root, " is outside the group of ", size);
  return static_cast<int>(root);
}

// Counts and displacements (elements) of one side of an uneven all-to-all:
// torch's split sizes count rows of dimension 0; empty splits mean equal ones.
void Splits(const char* op, const at::Tensor& t, const std::vector<int64_t>& splits, int size,
            std::vector<size_t>& counts, std::vector<size_t>& displs) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t row = rows == 0 ? 0 : t.numel() / rows;
  counts.assign(size, 0);
  displs.assign(size, 0);
  if (splits.empty()) {
    TORCH_CHECK_VALUE(rows % size == 0, "weft: ", op, ": ", rows, " rows do not split evenly over ", size, " ranks");
  } else {
    TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size, "weft: ", op, ": ", splits.size(),
                      " split sizes for a group of ", size);
  }
  size_t at = 0;
  for (int q = 0; q < size; ++q) {
    const int64_t n = splits.empty() ? rows / size : splits[q];
    TORCH_CHECK_VALUE(n >= 0, "weft: ", op, ": split size ", n);
    counts[q] = static_cast<size_t>(n * row);
    displs[q] = at;
    at += counts[q];
  }
  TORCH_CHECK_VALUE(at == static_cast<size_t>(t.numel()), "weft: ", op, ": the split sizes cover ", at,
                    " elements of a tensor of ", t.numel());
}

}  // namespace

c10::intrusive_ptr<c10d::Work> WeftBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor& t = One("reduce", tensors);
  const int root = Root("reduce", opts.rootRank, getSize());
  Op op(*this, "reduce", c10d::OpType::REDUCE, t);
  const weftDataType_t dt = WeftType(op.name(), t);
  const weftRedOp_t wop = WeftOp(op.name(), opts.reduceOp, t);
  at::Tensor buf = op.Out(t, /*read=*/true);
  at::Tensor in = buf;
  if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
    in = op.Premul(buf, opts.reduceOp);
    op.Keep(in);
  }
  op.Call([in, buf, dt, wop, root](weftComm_t c, void* s) {
    return weftReduce(in.data_ptr(), buf.data_ptr(), Count(buf), dt, wop, root, c, s);
  });
  return op.Issue(tensors);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const at::Tensor& input = One("gather", inputs);
  const int root = Root("gather", opts.rootRank, getSize());
  Op op(*this, "gather", c10d::OpType::GATHER, input);
  const weftDataType_t dt = WeftType(op.name(), input);
  at::Tensor in = op.In(input);
  at::Tensor flat;
  std::vector<at::Tensor> list;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), "weft: gather: "
                      "the root's output list must hold one tensor per rank (", getSize(), ")");
    for (const auto& o : outputs[0]) {
      TORCH_CHECK_VALUE(o.numel() == input.numel() && o.scalar_type() == input.scalar_type(), "weft: gather: an "
                        "output of ", o.numel(), " ", o.scalar_type(), " for an input of ", input.numel(), " ",
                        input.scalar_type());
      op.Keep(o);
    }
    list = outputs[0];
    flat = at::empty({input.numel() * getSize()}, input.options().memory_format(at::MemoryFormat::Contiguous));
    op.Keep(flat);
    const int64_t n = input.numel();
    op.Post([list, flat, n]() mutable {
      for (size_t i = 0; i < list.size(); ++i) list[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(list[i].sizes()));
    });
  }
  op.Call([in, flat, dt, root](weftComm_t c, void* s) {
    return weftGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, Count(in), dt, root, c, s);
  });
  return op.Issue(list);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  const at::Tensor& output = One("scatter", outputs);
  const int root = Root("scatter", opts.rootRank, getSize());
  Op op(*this, "scatter", c10d::OpType::SCATTER, output);
  const weftDataType_t dt = WeftType(op.name(), output);
  at::Tensor flat;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), "weft: scatter: "
                      "the root's input list must hold one tensor per rank (", getSize(), ")");
    std::vector<at::Tensor> parts;
    for (const auto& t : inputs[0]) {
      TORCH_CHECK_VALUE(t.numel() == output.numel() && t.scalar_type() == output.scalar_type() &&
                        t.device() == output.device(), "weft: scatter: an input of ", t.numel(), " ", t.scalar_type(),
                        " on ", t.device(), " for an output of ", output.numel(), " ", output.scalar_type(), " on ",
                        output.device());
      parts.push_back(t.reshape({-1}));
    }
    flat = op.In(at::cat(parts));
  }
  at::Tensor out = op.Out(output, /*read=*/false);
  op.Call([flat, out, dt, root](weftComm_t c, void* s) {
    return weftScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), Count(out), dt, root, c, s);
  });
  return op.Issue(outputs);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& output_splits,
                                                          std::vector<int64_t>& input_splits,
                                                          const c10d::AllToAllOptions&) {
  Op op(*this, "all_to_all_single", c10d::OpType::ALLTOALL_BASE, input);
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "weft: all_to_all_single: output ",
                    output.scalar_type(), ", input ", input.scalar_type());
  const weftDataType_t dt = WeftType(op.name(), input);
  at::Tensor in = op.In(input);
  at::Tensor out = op.Out(output, /*read=*/false);
  if (output_splits.empty() && input_splits.empty()) {
    TORCH_CHECK_VALUE(input.numel() == output.numel() && input.numel() % getSize() == 0, "weft: all_to_all_single: "
                      "input of ", input.numel(), " and output of ", output.numel(), " elements do not split evenly "
                      "over ", getSize(), " ranks");
    const size_t count = Count(input) / static_cast<size_t>(getSize());
    op.Call([in, out, count, dt](weftComm_t c, void* s) {
      return weftAllToAll(in.data_ptr(), out.data_ptr(), count, dt, c, s);
    });
    return op.Issue({output});
  }
  auto counts = std::make_shared<std::vector<size_t>[]>(4);
  Splits(op.name(), input, input_splits, getSize(), counts[0], counts[1]);
  Splits(op.name(), output, output_splits, getSize(), counts[2], counts[3]);
  op.Call([in, out, counts, dt](weftComm_t c, void* s) {  // weft reads the counts before it returns
    return weftAllToAllv(in.data_ptr(), counts[0].data(), counts[1].data(), out.data_ptr(), counts[2].data(),
                         counts[3].data(), dt, c, s);
  });
  return op.Issue({output});
}

c10::intrusive_ptr<c10d::Work> WeftBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions&) {
  TORCH_CHECK_VALUE(static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
                    "weft: all_to_all: ", inputs.size(), " inputs and ", outputs.size(), " outputs for a group of ",
                    getSize());
  Op op(*this, "all_to_all", c10d::OpType::ALLTOALL, inputs[0]);
  const weftDataType_t dt = WeftType(op.name(), inputs[0]);
  auto counts = std::make_shared<std::vector<size_t>[]>(4);
  std::vector<at::Tensor> in_parts;
  size_t in_at = 0, out_at = 0;
  for (int q = 0; q < getSize(); ++q) {
    TORCH_CHECK_VALUE(inputs[q].scalar_type() == inputs[0].scalar_type() &&
                      outputs[q].scalar_type() == inputs[0].scalar_type(), "weft: all_to_all: tensors of different "
                      "dtypes (", inputs[q].scalar_type(), ", ", outputs[q].scalar_type(), ")");
    TORCH_CHECK_VALUE(inputs[q].device() == inputs[0].device() && outputs[q].device() == inputs[0].device(),
                      "weft: all_to_all: a tensor on ", inputs[q].device(), " or ", outputs[q].device(), " beside one on ",
                      inputs[0].device(), "; every tensor of a collective must be on one device");
    in_parts.push_back(inputs[q].reshape({-1}));
    counts[0].push_back(Count(inputs[q]));
    counts[1].push_back(in_at);
    in_at += Count(inputs[q]);
    counts[2].push_back(Count(outputs[q]));
    counts[3].push_back(out_at);
    out_at += Count(outputs[q]);
    op.Keep(outputs[q]);
  }
  // weft moves one buffer each way; the lists are packed into and out of them.
  at::Tensor in = op.In(at::cat(in_parts));
  at::Tensor out = op.Out(at::empty({static_cast<int64_t>(out_at)}, inputs[0].options()), /*read=*/false);
  std::vector<at::Tensor> list = outputs;
  op.Post([list, out, counts]() mutable {
    for (size_t q = 0; q < list.size(); ++q) {
      list[q].copy_(out.narrow(0, static_cast<int64_t>(counts[3][q]), static_cast<int64_t>(counts[2][q]))
                        .view(list[q].sizes()));
    }
  });
  op.Call([in, out, counts, dt](weftComm_t c, void* s) {
    return weftAllToAllv(in.data_ptr(), counts[0].data(), counts[1].data(), out.data_ptr(), counts[2].data(),
                         counts[3].data(), dt, c, s);
  });
  return op.Issue(outputs);
}

// Point-to-point: weft has no tags, so only torch's default tag 0 is taken.
// Inside a coalesced group (batch_isend_irecv) they join its weft group.
void WeftBackend::CheckP2p(const char* op, int peer, int tag) {
  TORCH_CHECK_VALUE(tag == 0, "weft: ", op, ": tag ", tag, "; weft matches sends and receives by order, not by tag "
                    "(use tag 0)");
  TORCH_CHECK_VALUE(peer >= 0 && peer < getSize(), "weft: ", op, ": peer ", peer, " is outside the group of ", getSize());
}

// batch_isend_irecv leaves its coalesced group open when a call in it
// raises (torch does not call endCoalescing then), so a refused send or
// receive ends the group itself.
c10::intrusive_ptr<c10d::Work> WeftBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  try {
    const at::Tensor& t = One("send", tensors);
    CheckP2p("send", dst, tag);
    Op op(*this, "send", c10d::OpType::SEND, t);
    const weftDataType_t dt = WeftType(op.name(), t);
    at::Tensor in = op.In(t);
    op.Call([in, dt, dst](weftComm_t c, void* s) { return weftSend(in.data_ptr(), Count(in), dt, dst, c, s); });
    return op.Issue(tensors);
  } catch (...) {
    if (coalescing_) AbandonGroup();
    throw;
  }
}

c10::intrusive_ptr<c10d::Work> WeftBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  try {
    const at::Tensor& t = One("recv", tensors);
    CheckP2p("recv", src, tag);
    Op op(*this, "recv", c10d::OpType::RECV, t);
    const weftDataType_t dt = WeftType(op.name(), t);
    at::Tensor out = op.Out(t, /*read=*/false);
    op.Call([out, dt, src](weftComm_t c, void* s) { return weftRecv(out.data_ptr(), Count(out), dt, src, c, s); });
    return op.Issue(tensors);
  } catch (...) {
    if (coalescing_) AbandonGroup();
    throw;
  }
}

c10::intrusive_ptr<c10d::Work> WeftBackend::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "weft: recv from any source is not in weft's C ABI (weftRecv names its peer); "
                              "give recv a src");
}
c10::intrusive_ptr<c10d::Work> WeftBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>&,
                                                                std::vector<at::Tensor>&, const c10d::AllgatherOptions&) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "weft: all_gather_coalesced (lists of lists, deprecated in torch) is not "
                              "supported; use all_gather_into_tensor under a coalescing manager");
}

// ---------------------------------------------------------------- lifetime

void WeftBackend::abort() { comms_.Abort(); }

void WeftBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_) return;
    shut_ = true;
    stop_ = true;
    cv_.notify_one();
  }
  if (completion_.joinable()) completion_.join();  // every issued host collective has completed
  for (weftStream_t s : all_streams_) weftStreamDestroy(s);
  all_streams_.clear();
  free_streams_.clear();
  order_.reset();
  comms_.Destroy();
}

}  // namespace weft_c10d
