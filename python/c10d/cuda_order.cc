// CudaOrder over torch's CUDA streams and events.
#include "cuda_order.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace weft_c10d {

namespace {

class Done final : public CudaDone {
 public:
  Done(c10::cuda::CUDAStream stream) : stream_(stream) { end_.record(stream_); }

  bool Query() override { return end_.query(); }

  void BlockCurrentStream() override {
    end_.block(c10::cuda::getCurrentCUDAStream(stream_.device_index()));
  }

  c10::intrusive_ptr<c10::ivalue::Future> Future(const std::vector<at::Tensor>& outputs) override {
    auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                        std::vector<c10::Device>{stream_.device()});
    // markCompleted records the future's events on the current stream: the
    // communicator's, so users of the value wait for the collective.
    c10::cuda::CUDAStreamGuard guard(stream_);
    fut->markCompleted(c10::IValue(outputs));
    return fut;
  }

 private:
  c10::cuda::CUDAStream stream_;
  at::cuda::CUDAEvent end_;
};

class Order final : public CudaOrder {
 public:
  explicit Order(int device)
      : device_(static_cast<c10::DeviceIndex>(device)),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_)) {}

  std::shared_ptr<CudaDone> Run(const std::function<void(void*)>& enqueue,
                                const std::vector<at::Tensor>& keep) override {
    c10::cuda::CUDAGuard device_guard(device_);
    at::cuda::CUDAEvent ready;
    ready.record(c10::cuda::getCurrentCUDAStream(device_));
    ready.block(stream_);
    {
      c10::cuda::CUDAStreamGuard stream_guard(stream_);
      enqueue(static_cast<void*>(stream_.stream()));
    }
    // The caching allocator must not hand these blocks to another stream
    // before the collective has read or written them.
    for (const auto& t : keep) {
      if (t.defined() && t.is_cuda() && t.storage().data_ptr()) {
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
      }
    }
    return std::make_shared<Done>(stream_);
  }

 private:
  c10::DeviceIndex device_;
  c10::cuda::CUDAStream stream_;
};

}  // namespace

std::unique_ptr<CudaOrder> CudaOrder::Make(int device) { return std::make_unique<Order>(device); }

}  // namespace weft_c10d
