#include "comm/nccl/comm.h"

#include <chrono>
#include <utility>

#include "comm/bootstrap/bootstrap.h"
#include "comm/registry.h"
#include "core/cuda/runtime.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace nccl {

absl::Status ToStatus(ncclResult_t r, const std::string& message) {
  switch (r) {
    case ncclSuccess: return absl::OkStatus();
    case ncclInvalidArgument: return InvalidArgument("%s", message);
    case ncclInvalidUsage: return InvalidUsage("%s", message);
    case ncclRemoteError: return RemoteError("%s", message);
    case ncclInternalError: return InternalError("%s", message);
    default: return SystemError("%s", message);  // ncclUnhandledCudaError, ncclSystemError, ...
  }
}

DeviceGuard::DeviceGuard(int device) {
  status_ = cudaGetDevice(&saved_);
  if (status_ == cudaSuccess && saved_ != device) {
    status_ = cudaSetDevice(device);
  } else {
    saved_ = -1;  // nothing to restore
  }
}

DeviceGuard::~DeviceGuard() {
  if (saved_ >= 0) (void)cudaSetDevice(saved_);
}

NcclComm::NcclComm(ncclComm_t comm, int rank, int size, int device, const CommOptions& options)
    : Communicator(rank, size, options), comm_(comm), device_(device) {
  watchdog_ = std::thread([this] { Watchdog(); });
}

NcclComm::~NcclComm() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  DeviceGuard guard(device_);
  if (ncclComm_t c = comm_.exchange(nullptr); c != nullptr) {
    // After an asynchronous error (a peer died, a network fault) the
    // operations in flight never complete, and ncclCommDestroy, which flushes
    // them first, would wait forever: NCCL's answer to an async error is
    // ncclCommAbort.
    ncclResult_t async = ncclSuccess;
    const bool broken =
        !async_error().ok() || ncclCommGetAsyncError(c, &async) != ncclSuccess || async != ncclSuccess;
    const ncclResult_t r = broken ? ncclCommAbort(c) : ncclCommDestroy(c);
    if (r != ncclSuccess) {
      Log(LogLevel::kWarn, "nccl: %s on rank %d: %s", broken ? "ncclCommAbort" : "ncclCommDestroy", rank(),
          ncclGetErrorString(r));
    }
  }
  if (barrier_stream_ != nullptr) (void)cudaStreamDestroy(barrier_stream_);
  if (barrier_buf_ != nullptr) (void)cudaFree(barrier_buf_);
}

absl::Status NcclComm::Check(ncclResult_t r, const char* what) const {
  if (r == ncclSuccess) return absl::OkStatus();
  const ncclComm_t c = comm_.load();
  const char* last = c != nullptr ? ncclGetLastError(c) : nullptr;
  return ToStatus(r, absl::StrFormat("%s on rank %d (device %d): %s%s%s", what, rank(), device_,
                                     ncclGetErrorString(r), last != nullptr && *last ? ": " : "",
                                     last != nullptr ? last : ""));
}

absl::Status NcclComm::PollAsyncLocked() {
  const ncclComm_t c = comm_.load();
  if (c == nullptr) return absl::OkStatus();
  ncclResult_t async = ncclSuccess;
  RETURN_IF_ERROR(Check(ncclCommGetAsyncError(c, &async), "ncclCommGetAsyncError"));
  return Check(async, "asynchronous NCCL error");
}

void NcclComm::Watchdog() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(kWatchdogMs), [this] { return stop_; });
    if (stop_) break;
    absl::Status s = PollAsyncLocked();
    if (!s.ok()) {
      // One error is the communicator's error; the caller decides whether to abort.
      Log(LogLevel::kWarn, "nccl: %s", s.ToString());
      RecordAsyncError(s);
      break;
    }
  }
}

void NcclComm::DoAbort() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = true;
  if (ncclComm_t c = comm_.exchange(nullptr); c != nullptr) {
    DeviceGuard guard(device_);
    const ncclResult_t r = ncclCommAbort(c);
    if (r != ncclSuccess) Log(LogLevel::kWarn, "nccl: ncclCommAbort on rank %d: %s", rank(), ncclGetErrorString(r));
  }
  cv_.notify_all();
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclComm::DoSplit(int color, int key) {
  DeviceGuard guard(device_);
  RETURN_IF_ERROR(cuda::Check(guard.status(), "split: cudaSetDevice(%d)", device_));
  ncclComm_t sub = nullptr;
  RETURN_IF_ERROR(Check(ncclCommSplit(comm_.load(), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr),
                        "ncclCommSplit"));
  if (sub == nullptr) return std::unique_ptr<Communicator>();
  int r = 0, n = 0;
  ncclResult_t e = ncclCommUserRank(sub, &r);
  if (e == ncclSuccess) e = ncclCommCount(sub, &n);
  if (e != ncclSuccess) {
    (void)ncclCommDestroy(sub);
    return Check(e, "ncclCommUserRank/ncclCommCount of the new communicator");
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclComm>(sub, r, n, device_, options()));
}

namespace {

absl::StatusOr<int> ChooseDevice(const CommOptions& o, int local_rank) {
  ASSIGN_OR_RETURN(const int n, cuda::DeviceCount());
  if (o.cuda_device >= n) {
    return InvalidArgument("config.cuda_device = %d, but this node has %d CUDA device(s)", o.cuda_device, n);
  }
  return o.cuda_device >= 0 ? o.cuda_device : local_rank % n;
}

absl::StatusOr<std::unique_ptr<Communicator>> InitNcclWorld(bootstrap::Bootstrap& b, const CommOptions& options) {
  ASSIGN_OR_RETURN(const bootstrap::Locality where, bootstrap::FindLocality(b));
  absl::StatusOr<int> device = ChooseDevice(options, where.local_rank);
  if (device.ok()) {
    const cudaError_t e = cudaSetDevice(*device);
    if (e != cudaSuccess) device = cuda::ToStatus(e, absl::StrFormat("cudaSetDevice(%d)", *device));
  }
  // Decided together, so that a rank that cannot go on never leaves the
  // others blocked in ncclCommInitRank.
  ASSIGN_OR_RETURN(const bool all_ok, b.AllOk(device.ok()));
  if (!device.ok()) return Annotate(device.status(), absl::StrFormat("nccl init on rank %d", b.rank()));
  if (!all_ok) return RemoteError("nccl init: another rank could not choose a CUDA device (see its error)");

  // Rank 0's unique id, and whether it got one, to every rank.
  struct {
    ncclResult_t result;
    ncclUniqueId id;
  } root{ncclSuccess, {}};
  if (b.rank() == 0) root.result = ncclGetUniqueId(&root.id);
  RETURN_IF_ERROR(b.Broadcast(&root, sizeof(root)));
  if (root.result != ncclSuccess) {
    return ToStatus(root.result, absl::StrFormat("nccl init: ncclGetUniqueId on rank 0: %s",
                                                 ncclGetErrorString(root.result)));
  }
  const int rank = b.rank(), size = b.size();
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, size, root.id, rank);
  if (r != ncclSuccess) {
    return ToStatus(r, absl::StrFormat("nccl init: ncclCommInitRank(nranks %d, rank %d, device %d): %s: %s", size,
                                       rank, *device, ncclGetErrorString(r), ncclGetLastError(nullptr)));
  }
  int version = 0;
  (void)ncclGetVersion(&version);
  Log(LogLevel::kInfo, "nccl: rank %d of %d on device %d, NCCL %d", rank, size, *device, version);
  // The device chosen, not -1: the reducer and shard groups put their streams
  // and memory on options().cuda_device (else on whatever device is current
  // in their caller's thread, which need not be this one).
  CommOptions on_device = options;
  on_device.cuda_device = *device;
  return std::unique_ptr<Communicator>(std::make_unique<NcclComm>(comm, rank, size, *device, on_device));
}

[[maybe_unused]] const bool kRegistered =
    RegisterBackend({Backend::kNccl, MemKind::kCuda, nullptr, &InitNcclWorld});

}  // namespace
}  // namespace nccl
}  // namespace weft
