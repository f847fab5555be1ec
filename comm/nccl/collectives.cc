// NCCL collectives: each one enqueues on the caller's stream on this
// communicator's device and returns; NCCL orders them by the stream.
#include <chrono>
#include <functional>
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
    case DataType::kInt16: break;  // none in NCCL: int16.cc reduces it widened, MovedAs moves its bytes
  }
  return ncclNumTypes;
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

// How the collectives that only move data give a type to NCCL: as itself,
// or as its bytes where NCCL has no such type (int16). NCCL moves every
// type as bytes internally, so nothing changes but the count.
struct Moved {
  ncclDataType_t type;
  size_t per;  // elements of `type` per element of weft's type
};

Moved MovedAs(DataType t) { return t == DataType::kInt16 ? Moved{ncclUint8, ElementSize(t)} : Moved{ToNccl(t), 1}; }

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
  return AfterCollective([=, this]() -> absl::Status {
    WEFT_NCCL_ON_DEVICE(what);
    const kernels::Segment seg{buf, t, buf, t, count};  // in place: each element is read, then written, by one thread
    const int e = dk->copy(&seg, 1, 1.0f / static_cast<float>(size()), /*accumulate=*/false, stream);
    if (e != 0) {
      return SystemError("%s on rank %d: scaling the sum by 1/%d: %s", what, rank(), size(), dk->error_string(e));
    }
    return absl::OkStatus();
  });
}

absl::Status NcclComm::DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                   void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclAllReduce");
  if (t == DataType::kInt16) {
    return ReduceWidened("ncclAllReduce", op, send, count, recv, 0, count, stream, [&](int32_t* buf) {
      return ncclAllReduce(buf, buf, count, ncclInt32, ToNccl(op), comm_.load(), static_cast<cudaStream_t>(stream));
    });
  }
  const bool scale = SumThenScale(t, op);
  RETURN_IF_ERROR(Check(ncclAllReduce(send, recv, count, ToNccl(t), scale ? ncclSum : ToNccl(op), comm_.load(),
                                      static_cast<cudaStream_t>(stream)),
                        "ncclAllReduce"));
  return scale && count > 0 ? ScaleByInverseSize(recv, count, t, stream, "ncclAllReduce") : absl::OkStatus();
}

absl::Status NcclComm::DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                       void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclReduceScatter");
  if (t == DataType::kInt16) {
    // In place in the widened buffer: this rank's block is its output.
    const size_t own = static_cast<size_t>(rank()) * recvcount;
    return ReduceWidened("ncclReduceScatter", op, send, recvcount * static_cast<size_t>(size()), recv, own, recvcount,
                         stream, [&](int32_t* buf) {
      return ncclReduceScatter(buf, buf + own, recvcount, ncclInt32, ToNccl(op), comm_.load(),
                               static_cast<cudaStream_t>(stream));
    });
  }
  const bool scale = SumThenScale(t, op);
  RETURN_IF_ERROR(Check(ncclReduceScatter(send, recv, recvcount, ToNccl(t), scale ? ncclSum : ToNccl(op),
                                          comm_.load(), static_cast<cudaStream_t>(stream)),
                        "ncclReduceScatter"));
  return scale && recvcount > 0 ? ScaleByInverseSize(recv, recvcount, t, stream, "ncclReduceScatter")
                                : absl::OkStatus();
}

absl::Status NcclComm::DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclAllGather");
  const Moved m = MovedAs(t);
  return Check(ncclAllGather(send, recv, sendcount * m.per, m.type, comm_.load(), static_cast<cudaStream_t>(stream)),
               "ncclAllGather");
}

absl::Status NcclComm::DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root,
                                   void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclBroadcast");
  const Moved m = MovedAs(t);
  return Check(ncclBroadcast(send, recv, count * m.per, m.type, root, comm_.load(), static_cast<cudaStream_t>(stream)),
               "ncclBroadcast");
}

absl::Status NcclComm::DoSend(const void* send, size_t count, DataType t, int peer, int /*tag: 0*/, void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclSend");
  const Moved m = MovedAs(t);
  return Check(ncclSend(send, count * m.per, m.type, peer, comm_.load(), static_cast<cudaStream_t>(stream)),
               "ncclSend");
}

absl::Status NcclComm::DoRecv(void* recv, size_t count, DataType t, int peer, int /*tag: 0*/, int* /*null*/,
                              void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclRecv");
  const Moved m = MovedAs(t);
  return Check(ncclRecv(recv, count * m.per, m.type, peer, comm_.load(), static_cast<cudaStream_t>(stream)),
               "ncclRecv");
}

absl::Status NcclComm::DoReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                                void* stream) {
  WEFT_NCCL_ON_DEVICE("ncclReduce");
  if (t == DataType::kInt16) {
    return ReduceWidened("ncclReduce", op, send, count, recv, 0, rank() == root ? count : 0, stream, [&](int32_t* buf) {
      return ncclReduce(buf, buf, count, ncclInt32, ToNccl(op), root, comm_.load(), static_cast<cudaStream_t>(stream));
    });
  }
  const bool scale = SumThenScale(t, op);
  RETURN_IF_ERROR(Check(ncclReduce(send, recv, count, ToNccl(t), scale ? ncclSum : ToNccl(op), root, comm_.load(),
                                   static_cast<cudaStream_t>(stream)),
                        "ncclReduce"));
  return scale && count > 0 && rank() == root ? ScaleByInverseSize(recv, count, t, stream, "ncclReduce")
                                              : absl::OkStatus();
}

namespace {

// Every block of an exchange as one NCCL group of sends and receives.
// Blocks of 0 elements are left out (NCCL would match nothing either way).
struct Exchange {
  const char* what;
  ncclComm_t comm;
  cudaStream_t stream;
  Moved m;
  size_t es;  // bytes per element of weft's type
};

// The root's own block of a gather or scatter, on the stream (nothing in place).
absl::Status CopyOwn(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return absl::OkStatus();
  return cuda::Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
}

absl::Status RunGroup(const Exchange& x, int size, const std::function<ncclResult_t(int peer)>& per_peer,
                      const std::function<absl::Status(ncclResult_t, const char*)>& check) {
  RETURN_IF_ERROR(check(ncclGroupStart(), x.what));
  ncclResult_t first = ncclSuccess;
  for (int q = 0; q < size && first == ncclSuccess; ++q) first = per_peer(q);
  const ncclResult_t end = ncclGroupEnd();  // always closed, also after a failed call
  RETURN_IF_ERROR(check(first, x.what));
  return check(end, x.what);
}

}  // namespace

absl::Status NcclComm::DoGather(const void* send, void* recv, size_t sendcount, DataType t, int root, void* stream) {
  WEFT_NCCL_ON_DEVICE("gather");
  const Exchange x{"gather (ncclSend/ncclRecv)", comm_.load(), static_cast<cudaStream_t>(stream), MovedAs(t),
                   ElementSize(t)};
  const bool at_root = rank() == root;
  RETURN_IF_ERROR(RunGroup(x, size(), [&](int q) -> ncclResult_t {
    if (sendcount == 0 || (at_root && q == root)) return ncclSuccess;  // root's own block: a copy
    if (at_root) {
      return ncclRecv(static_cast<char*>(recv) + q * sendcount * x.es, sendcount * x.m.per, x.m.type, q, x.comm,
                      x.stream);
    }
    return q == root ? ncclSend(send, sendcount * x.m.per, x.m.type, root, x.comm, x.stream) : ncclSuccess;
  }, [this](ncclResult_t r, const char* what) { return Check(r, what); }));
  return at_root ? CopyOwn(static_cast<char*>(recv) + root * sendcount * x.es, send, sendcount * x.es, x.stream)
                 : absl::OkStatus();
}

absl::Status NcclComm::DoScatter(const void* send, void* recv, size_t recvcount, DataType t, int root,
                                 void* stream) {
  WEFT_NCCL_ON_DEVICE("scatter");
  const Exchange x{"scatter (ncclSend/ncclRecv)", comm_.load(), static_cast<cudaStream_t>(stream), MovedAs(t),
                   ElementSize(t)};
  const bool at_root = rank() == root;
  RETURN_IF_ERROR(RunGroup(x, size(), [&](int q) -> ncclResult_t {
    if (recvcount == 0 || (at_root && q == root)) return ncclSuccess;
    if (at_root) {
      return ncclSend(static_cast<const char*>(send) + q * recvcount * x.es, recvcount * x.m.per, x.m.type, q, x.comm,
                      x.stream);
    }
    return q == root ? ncclRecv(recv, recvcount * x.m.per, x.m.type, root, x.comm, x.stream) : ncclSuccess;
  }, [this](ncclResult_t r, const char* what) { return Check(r, what); }));
  return at_root ? CopyOwn(recv, static_cast<const char*>(send) + root * recvcount * x.es, recvcount * x.es, x.stream)
                 : absl::OkStatus();
}

absl::Status NcclComm::DoAllToAllv(const void* send, const std::vector<size_t>& sendcounts,
                                   const std::vector<size_t>& sdispls, void* recv,
                                   const std::vector<size_t>& recvcounts, const std::vector<size_t>& rdispls,
                                   DataType t, void* stream) {
  WEFT_NCCL_ON_DEVICE("all_to_all");
  const Exchange x{"all_to_all (ncclSend/ncclRecv)", comm_.load(), static_cast<cudaStream_t>(stream), MovedAs(t),
                   ElementSize(t)};
  return RunGroup(x, size(), [&](int q) -> ncclResult_t {
    const auto p = static_cast<size_t>(q);
    ncclResult_t r = ncclSuccess;
    if (sendcounts[p] > 0) {
      r = ncclSend(static_cast<const char*>(send) + sdispls[p] * x.es, sendcounts[p] * x.m.per, x.m.type, q, x.comm,
                   x.stream);
    }
    if (r == ncclSuccess && recvcounts[p] > 0) {
      r = ncclRecv(static_cast<char*>(recv) + rdispls[p] * x.es, recvcounts[p] * x.m.per, x.m.type, q, x.comm,
                   x.stream);
    }
    return r;
  }, [this](ncclResult_t r, const char* what) { return Check(r, what); });
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
