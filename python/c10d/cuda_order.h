// Stream order for collectives on CUDA tensors, as ProcessGroupNCCL keeps it.
//
// Each CUDA communicator of a group has a stream of its own. A collective is
// enqueued there after an event recorded on torch's current stream (so it
// reads what the caller's kernels wrote), and an event recorded after it is
// what Work::wait makes the caller's current stream wait for. Nothing waits
// on the host, and nothing synchronises the device.
//
//   CudaOrder& order = ...;                    // one per CUDA communicator
//   auto done = order.Run([&](void* stream) { weftAllReduce(..., stream); }, keep);
//   done->BlockCurrentStream();                // Work::wait
//
// cuda_order.cc implements it; cuda_order_none.cc, built when torch or this
// machine has no CUDA, refuses with a message. Only meson chooses.
#ifndef WEFT_PYTHON_C10D_CUDA_ORDER_H_
#define WEFT_PYTHON_C10D_CUDA_ORDER_H_

#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

namespace weft_c10d {

// The end of one enqueued collective.
class CudaDone {
 public:
  virtual ~CudaDone() = default;
  virtual bool Query() = 0;               // has the device run it?
  virtual void BlockCurrentStream() = 0;  // torch's current stream waits for it
  // A future already completed in stream order (its value is usable on any
  // stream that waits for it, as ProcessGroupNCCL's futures are).
  virtual c10::intrusive_ptr<c10::ivalue::Future> Future(const std::vector<at::Tensor>& outputs) = 0;
};

class CudaOrder {
 public:
  // Throws (naming the reason) when this build has no CUDA.
  static std::unique_ptr<CudaOrder> Make(int device);
  virtual ~CudaOrder() = default;
  // Runs `enqueue(stream)` with the device current and the communicator's
  // stream current for torch (so torch ops inside it are ordered too), after
  // that stream waited for the caller's; then records the end and ties
  // `keep` to the stream in torch's caching allocator.
  virtual std::shared_ptr<CudaDone> Run(const std::function<void(void*)>& enqueue,
                                        const std::vector<at::Tensor>& keep) = 0;
};

}  // namespace weft_c10d

#endif  // WEFT_PYTHON_C10D_CUDA_ORDER_H_
