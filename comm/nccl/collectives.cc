// NCCL collectives: each one enqueues on the caller's stream on this
// communicator's device and returns; NCCL orders them by the stream.
#include <chrono>
#include <thread>

#include "comm/nccl/comm.h"
#include "core/cuda/runtime.h"
#include "core/status.h"
#include "kernels/device.h"

namespace weft {
namespace nccl {

ncclDataType_t ToNccl(DataType t) {
  switch (t) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBfloat16: return ncclBfloat16;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt8: return ncclInt8;
    case DataType::kUint8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
  }
  return ncclNumTypes;  // unreachable: the Communicator checked t
}

ncclRedOp_t ToNccl(RedOp op) {
  switch (op) {
    case RedOp::kSum: return ncclSum;
    case RedOp::kProd: return ncclProd;
    case RedOp::kMax: return ncclMax;
    case RedOp::kMin: return ncclMin;
    case RedOp::kAvg: return ncclAvg;
  }
  return ncclNumOps;
}

#define WEFT_NCCL_ON_DEVICE(what)                                                            \
  DeviceGuard guard(device_);                                                                \
  RETURN_IF_ERROR(cuda::Check(guard.status(), "%s: cudaSetDevice(%d)", what, device_))

namespace {

// ncclAvg on bfloat16 multiplies every input by 1/N rounded to bfloat16
// first (8 bits: 1/3 becomes 0.33398, 1/24 0.041748), a bias of up to 0.2%
// that every step repeats whenever N is not a power of two. bfloat16 has
// float32's range, so its sum cannot overflow where the average would not:
// such an average is a sum, then one scaling by 1/N in float32, rounded once.
bool SumThenScale(DataType t, RedOp op) { return op == RedOp::kAvg && t == DataType::kBfloat16; }

}  // namespace

absl::Status NcclComm::ScaleByInverseSize(void* buf, size_t count, DataType t, void* stream, const char* what) {
  const kernels::DeviceKernels* dk = kernels::GetDeviceKernels();
  if (dk == nullptr) return InternalError("%s: a CUDA build without the device kernels", what);
  const kernels::Segment seg{buf, t, buf, t, count};  // in place: each element is read, then written, by one thread
  const int e = dk->copy(&seg, 1, 1.0f / static_cast<float>(size()), /*accumulate=*/false, stream);
  if (e != 0) {
    return SystemError("%s on rank %d: scaling the sum by 1/%d: %s", what, rank(), size(), dk->error_string(e));
  }
  return absl::OkStatus();
}

absl::Status NcclComm::DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                   void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclAllReduce");
  const bool scale = SumThenScale(t, op);
  RETURN_IF_ERROR(Check(ncclAllReduce(send, recv, count, ToNccl(t), scale ? ncclSum : ToNccl(op), comm_.load(),
                                      static_cast<cudaStream_t>(stream)),
                        "ncclAllReduce"));
  return scale && count > 0 ? ScaleByInverseSize(recv, count, t, stream, "ncclAllReduce") : absl::OkStatus();
}

absl::Status NcclComm::DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                       void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclReduceScatter");
  const bool scale = SumThenScale(t, op);
  RETURN_IF_ERROR(Check(ncclReduceScatter(send, recv, recvcount, ToNccl(t), scale ? ncclSum : ToNccl(op),
                                          comm_.load(), static_cast<cudaStream_t>(stream)),
                        "ncclReduceScatter"));
  return scale && recvcount > 0 ? ScaleByInverseSize(recv, recvcount, t, stream, "ncclReduceScatter")
                                : absl::OkStatus();
}

absl::Status NcclComm::DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclAllGather");
  return Check(ncclAllGather(send, recv, sendcount, ToNccl(t), comm_.load(), static_cast<cudaStream_t>(stream)),
               "ncclAllGather");
}

absl::Status NcclComm::DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root,
                                   void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclBroadcast");
  return Check(ncclBroadcast(send, recv, count, ToNccl(t), root, comm_.load(), static_cast<cudaStream_t>(stream)),
               "ncclBroadcast");
}

absl::Status NcclComm::DoBarrier() {
  WEFT_NCCL_ON_DEVICE("barrier");
  if (barrier_buf_ == nullptr) {
    RETURN_IF_ERROR(cuda::Check(cudaMalloc(reinterpret_cast<void**>(&barrier_buf_), sizeof(int)), "barrier: cudaMalloc"));
    RETURN_IF_ERROR(cuda::Check(cudaMemset(barrier_buf_, 0, sizeof(int)), "barrier: cudaMemset"));
    RETURN_IF_ERROR(cuda::Check(cudaStreamCreateWithFlags(&barrier_stream_, cudaStreamNonBlocking),
                                "barrier: cudaStreamCreateWithFlags"));
  }
  RETURN_IF_ERROR(Check(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, comm_.load(), barrier_stream_),
                        "barrier: ncclAllReduce"));
  // Wait without blocking in the driver, so a dead peer becomes an error instead of a hang.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options().timeout_ms);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(barrier_stream_);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return cuda::ToStatus(e, "barrier: cudaStreamQuery");
    {
      std::lock_guard<std::mutex> lock(mu_);
      RETURN_IF_ERROR(PollAsyncLocked());
    }
    if (aborted()) return Aborted("barrier: the communicator (rank %d) was aborted", rank());
    if (std::chrono::steady_clock::now() > deadline) {
      // The barrier's all-reduce stays queued on NCCL, and everything issued
      // after it would wait behind it: the timeout is the communicator's
      // error from now on (async_error), so callers see it and destruction
      // aborts instead of flushing work that never completes.
      const absl::Status late = Timeout("barrier: rank %d waited %d ms for the other %d rank(s)", rank(),
                                        options().timeout_ms, size() - 1);
      RecordAsyncError(late);
      return late;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

#undef WEFT_NCCL_ON_DEVICE

}  // namespace nccl
}  // namespace weft
