// WeftWork: a collective's (or a coalesced group's) completion, its future
// and the tensors it keeps alive.
#include <c10/util/Exception.h>

#include "backend.h"

namespace weft_c10d {

WeftWork::WeftWork(int rank, c10d::OpType type, const char* op, bool cuda, weftComm_t comm)
    : c10d::Work(rank, type), op_(op), cuda_(cuda), comm_(comm) {
  // Host work: completed by OnStreamDone. CUDA work: made by CudaDone, in stream order.
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
    // Without a timeout of its own, the waiter runs the collective and its
    // completion on this thread where the stream's thread has not begun
    // them (weftStreamWaitersRun); the stream, pinned, holds nothing else.
    if (timeout == kNoTimeout && !isCompleted() && backend_ != nullptr && backend_->PinStream(*this)) {
      weftStreamSynchronize(stream_);  // its error is the Work's, which OnStreamDone recorded
      backend_->UnpinStream(*this);
    }
    return c10d::Work::wait(timeout);  // until OnStreamDone completed it
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

int WeftWork::sourceRank() const {
  if (!source_) return c10d::Work::sourceRank();
  return *source_;
}

void WeftWork::OnStreamDone(weftStream_t stream, weftResult_t status, void* arg) {
  // The reference Finish took for this callback.
  auto work = c10::intrusive_ptr<WeftWork>::reclaim(static_cast<WeftWork*>(arg));
  std::exception_ptr error;
  if (status != weftSuccess) {  // this thread's last error is the collectives' failure
    error = std::make_exception_ptr(c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                                          WeftError(work->op_, work->rank_, status)));
  }
  work->Complete(error);
  // Where this is the last reference (the waiter has returned and dropped
  // the Work, or nobody waited), dropping it here would free the tensors,
  // and with them their Python objects, on this thread; once the
  // interpreter is finalizing (the program that waited has ended) that ends
  // the thread inside a noexcept frame and the process aborts, as torch's
  // gloo workers do. The group keeps it for an issuing thread to drop.
  work->release_(stream, std::move(work));
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
  finish(error);  // wakes wait() before the future's callbacks run
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace weft_c10d
