// Op: the checks, staging and issue shared by every collective.
#include "op.h"

#include <c10/util/Exception.h>

namespace weft_c10d {

namespace {

// The weft type of a torch dtype, if it has one.
bool HasWeftType(at::ScalarType s, weftDataType_t* out) {
  switch (s) {
    case at::kFloat: *out = weftFloat32; return true;
    case at::kDouble: *out = weftFloat64; return true;
    case at::kBFloat16: *out = weftBfloat16; return true;
    case at::kHalf: *out = weftFloat16; return true;
    case at::kChar: *out = weftInt8; return true;
    case at::kByte: *out = weftUint8; return true;
    case at::kBool: *out = weftUint8; return true;  // one byte, 0 or 1; the ops are mapped so it stays so
    case at::kShort: *out = weftInt16; return true;
    case at::kInt: *out = weftInt32; return true;
    case at::kLong: *out = weftInt64; return true;
    default: return false;
  }
}

const char* ReduceOpName(const c10d::ReduceOp& rop) {
  switch (rop.op_) {
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    default: return "BAND/BOR/BXOR";
  }
}

}  // namespace

Typed ReducedAs(const char* op, const at::Tensor& t) {
  weftDataType_t dt;
  if (HasWeftType(t.scalar_type(), &dt)) return {dt, 1};
  switch (t.scalar_type()) {
    case at::kComplexHalf: return {weftFloat16, 2};
    case at::kComplexFloat: return {weftFloat32, 2};
    case at::kComplexDouble: return {weftFloat64, 2};
    default:
      TORCH_CHECK_TYPE(false, "weft: ", op, ": dtype ", t.scalar_type(), " has no weft reduction (weft reduces "
                       "float32/64, bfloat16, float16, int8/16/32/64, uint8, bool, and complex as pairs of floats); "
                       "convert the tensor first");
  }
}

Typed MovedAs(const at::Tensor& t) {
  weftDataType_t dt;
  if (HasWeftType(t.scalar_type(), &dt)) return {dt, 1};
  return {weftUint8, static_cast<size_t>(t.element_size())};
}

weftRedOp_t WeftOp(const char* op, const c10d::ReduceOp& rop, const at::Tensor& t) {
  const bool is_bool = t.scalar_type() == at::kBool;
  if (t.is_complex()) {
    const bool sum = rop.op_ == c10d::ReduceOp::SUM || rop.op_ == c10d::ReduceOp::AVG ||
                     rop.op_ == c10d::ReduceOp::PREMUL_SUM;
    TORCH_CHECK_VALUE(sum, "weft: ", op, ": ReduceOp ", ReduceOpName(rop), " of a ", t.scalar_type(), " tensor: "
                      "complex tensors are reduced as (real, imaginary) pairs, which is right for SUM, AVG and "
                      "PREMUL_SUM only");
  }
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

const at::Tensor& One(const char* op, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK_VALUE(tensors.size() == 1, "weft: ", op, ": ", tensors.size(), " tensors; weft takes one per "
                    "process (one device per rank)");
  return tensors[0];
}

c10::intrusive_ptr<c10d::Work> Op::Issue(std::vector<at::Tensor> outputs, bool async_op) {
  ++b_.seq_;
  if (!async_op && !cuda_ && !b_.coalescing_) return RunHere(std::move(outputs));
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

// A blocking call (torch waits for its Work at once) on host tensors runs
// on the calling thread, with no stream, as barrier does. Enqueued, it would
// wake a stream's thread only for the waiter to run it (weftStreamWaitersRun)
// or to wait for that thread: either way a thread woken for nothing, on
// cores that the group's other ranks are using, which on a loaded machine
// delays them. The communicator's issue order still runs it behind the
// group's collectives in flight on streams. Errors are thrown here, as
// barrier's are; there is nothing left running that reads the tensors.
c10::intrusive_ptr<c10d::Work> Op::RunHere(std::vector<at::Tensor> outputs) {
  b_.DropRetired();
  for (auto& call : calls_) {
    weftResult_t r = call(comm_, nullptr);
    if (r != weftSuccess) C10_THROW_ERROR(DistBackendError, WeftError(name_, rank(), r));
  }
  auto work = c10::make_intrusive<WeftWork>(rank(), type_, name_, false, comm_);
  for (auto& t : outputs) work->outputs_.push_back(t);
  for (auto& f : post_) work->post_.push_back(std::move(f));
  work->Complete(nullptr);  // copies results out of temporaries; a failure there is the Work's
  return work;
}

}  // namespace weft_c10d
