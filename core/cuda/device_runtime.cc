// core/device_runtime.h over the CUDA runtime API, installed at load time.
#include "core/device_runtime.h"

#include "core/cuda/runtime.h"
#include "core/status.h"

namespace weft {
namespace cuda {
namespace {

cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t E(void* e) { return static_cast<cudaEvent_t>(e); }

class CudaRuntime final : public DeviceRuntime {
 public:
  absl::StatusOr<int> DeviceCount() const override { return cuda::DeviceCount(); }
  absl::StatusOr<int> CurrentDevice() const override {
    int d = -1;
    RETURN_IF_ERROR(Check(cudaGetDevice(&d), "cudaGetDevice"));
    return d;
  }
  absl::Status SetDevice(int device) const override {
    return Check(cudaSetDevice(device), "cudaSetDevice(%d)", device);
  }
  absl::StatusOr<void*> CreateStream() const override {
    cudaStream_t s = nullptr;
    RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"));
    return static_cast<void*>(s);
  }
  void DestroyStream(void* stream) const override { (void)cudaStreamDestroy(S(stream)); }
  absl::Status SynchronizeStream(void* stream) const override {
    return Check(cudaStreamSynchronize(S(stream)), "cudaStreamSynchronize(%p)", stream);
  }
  absl::StatusOr<void*> CreateEvent() const override {
    cudaEvent_t e = nullptr;
    RETURN_IF_ERROR(Check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    return static_cast<void*>(e);
  }
  void DestroyEvent(void* event) const override { (void)cudaEventDestroy(E(event)); }
  absl::Status Record(void* event, void* stream) const override {
    return Check(cudaEventRecord(E(event), S(stream)), "cudaEventRecord(stream %p)", stream);
  }
  absl::Status Wait(void* stream, void* event) const override {
    return Check(cudaStreamWaitEvent(S(stream), E(event), 0), "cudaStreamWaitEvent(stream %p)", stream);
  }
  absl::StatusOr<void*> AllocAsync(size_t bytes, void* stream) const override {
    void* p = nullptr;
    RETURN_IF_ERROR(Check(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, S(stream)), "cudaMallocAsync(%zu bytes)", bytes));
    return p;
  }
  absl::Status FreeAsync(void* p, void* stream) const override {
    return Check(cudaFreeAsync(p, S(stream)), "cudaFreeAsync(%p)", p);
  }
  absl::Status MemsetAsync(void* p, int value, size_t bytes, void* stream) const override {
    return Check(cudaMemsetAsync(p, value, bytes, S(stream)), "cudaMemsetAsync(%p, %zu bytes)", p, bytes);
  }
  absl::Status CopyAsync(void* dst, const void* src, size_t bytes, void* stream) const override {
    return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S(stream)), "cudaMemcpyAsync(%p <- %p, %zu bytes)",
                 dst, src, bytes);
  }
};

const CudaRuntime kRuntime;
[[maybe_unused]] const bool kRegistered = RegisterDeviceRuntime(&kRuntime);

}  // namespace
}  // namespace cuda
}  // namespace weft
