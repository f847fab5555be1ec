// The NCCL backend: collectives on CUDA device memory, ordered on the
// caller's cudaStream_t.
//
// One NcclComm wraps one ncclComm_t on one device. The world communicator
// spans MPI_COMM_WORLD when an MPI launcher started the process (rank 0's
// ncclUniqueId is broadcast over MPI), else it is a single rank; bootstrap.h
// hides which (a build without MPI is always a single rank). The device is CommOptions.cuda_device, or the rank on its node
// modulo the node's device count. Without a usable GPU, init fails with
// Unsupported naming the CUDA error; nothing crashes.
//
// Errors NCCL raises asynchronously (a peer died, a network fault) are
// polled by a watchdog thread (ncclCommGetAsyncError every kWatchdogMs) and
// recorded as the communicator's async error; Abort() is ncclCommAbort.
//
// Arithmetic is NCCL's, which is not quite weft.h's weftAvg: NCCL adds
// float16 and bfloat16 in their own type hop by hop, averages float16,
// float32 and float64 by multiplying every input by 1/N rounded to that type
// (float16: up to 2^-11 relative bias where N is not a power of two), and
// integers by a sum that wraps in their own type, divided after. A bfloat16
// average is therefore a sum followed by a scaling in float32 here
// (collectives.cc): NCCL's 1/N in bfloat16 would bias every result by up to
// 0.2%. With small-integer inputs (exact sums) and N a power of two all agree.
// NCCL has no int16: it is moved as bytes and reduced widened to int32
// (int16.cc), which gives the host backends' results bit for bit.
//
//   CommOptions o;
//   o.memory = MemKind::kCuda;
//   ASSIGN_OR_RETURN(auto comm, InitWorld(Backend::kNccl, o));
//   RETURN_IF_ERROR(comm->AllReduce(d_buf, d_buf, n, DataType::kBfloat16, RedOp::kAvg, stream));
#ifndef WEFT_COMM_NCCL_COMM_H_
#define WEFT_COMM_NCCL_COMM_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace weft {
namespace nccl {

class NcclComm final : public Communicator {
 public:
  // Takes ownership of `comm`, which lives on CUDA device `device`.
  NcclComm(ncclComm_t comm, int rank, int size, int device, const CommOptions& options);
  ~NcclComm() override;
  Backend backend() const override { return Backend::kNccl; }
  int device() const { return device_; }

 protected:
  absl::Status DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                           void* stream) override;
  absl::Status DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                               void* stream) override;
  absl::Status DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream) override;
  absl::Status DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root,
                           void* stream) override;
  // ncclSend / ncclRecv; gather, scatter and all-to-all are NCCL groups of
  // them (any NCCL from 2.7), so ranks that send to each other need a group
  // (Communicator::GroupStart) as in NCCL.
  absl::Status DoSend(const void* send, size_t count, DataType t, int peer, int tag, void* stream) override;
  absl::Status DoRecv(void* recv, size_t count, DataType t, int peer, int tag, int* source, void* stream) override;
  // torch's own NCCL backend ignores a tag; weft refuses it at the entry point.
  const char* TagsUnsupported() const override {
    return "NCCL's ncclSend/ncclRecv take no tag and name their peer (use tag 0 and a peer)";
  }
  absl::Status DoReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                        void* stream) override;
  absl::Status DoGather(const void* send, void* recv, size_t sendcount, DataType t, int root, void* stream) override;
  absl::Status DoScatter(const void* send, void* recv, size_t recvcount, DataType t, int root, void* stream) override;
  absl::Status DoAllToAllv(const void* send, const std::vector<size_t>& sendcounts, const std::vector<size_t>& sdispls,
                           void* recv, const std::vector<size_t>& recvcounts, const std::vector<size_t>& rdispls,
                           DataType t, void* stream) override;
  // Blocking: a one-element all-reduce on an internal stream, waited for up
  // to the communicator's timeout.
  absl::Status DoBarrier() override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override;
  void DoAbort() override;

 private:
  static constexpr int kWatchdogMs = 100;

  // OK, or the NCCL error as a status naming `what`, this rank and NCCL's last message.
  absl::Status Check(ncclResult_t r, const char* what) const;
  // buf[0, count) *= 1/size() in float32, rounded once, on `stream` (the
  // second half of a bfloat16 average: collectives.cc).
  absl::Status ScaleByInverseSize(void* buf, size_t count, DataType t, void* stream, const char* what);
  // An int16 reduction (int16.cc): `send` (in_count int16) widened into an
  // int32 temporary, `reduce` reduces that in place with NCCL, and out_count
  // elements from out_offset are narrowed into `recv`.
  absl::Status ReduceWidened(const char* what, RedOp op, const void* send, size_t in_count, void* recv,
                             size_t out_offset, size_t out_count, void* stream,
                             const std::function<ncclResult_t(int32_t* buf)>& reduce);
  // NCCL's asynchronous error as a status (OK when none). Needs mu_.
  absl::Status PollAsyncLocked();
  void Watchdog();

  std::atomic<ncclComm_t> comm_;  // nullptr once aborted
  const int device_;

  // Barrier scratch, made on first use.
  int* barrier_buf_ = nullptr;
  cudaStream_t barrier_stream_ = nullptr;

  // The watchdog and Abort/destruction both touch comm_: mu_ orders them.
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread watchdog_;
};

// Makes the current device `device` for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int saved_ = -1;
  cudaError_t status_ = cudaSuccess;
};

// Enqueues `work` on the stream behind the collective just called: now, or,
// inside a group, right after the outermost ncclGroupEnd (group.cc).
absl::Status AfterCollective(std::function<absl::Status()> work);

// ncclNumTypes for int16, which NCCL has no type for (int16.cc).
ncclDataType_t ToNccl(DataType t);
ncclRedOp_t ToNccl(RedOp op);
// NCCL's result as weft's: the absl code of the matching weftResult_t.
absl::Status ToStatus(ncclResult_t r, const std::string& message);

}  // namespace nccl
}  // namespace weft

#endif  // WEFT_COMM_NCCL_COMM_H_
