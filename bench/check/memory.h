// Where weft-check's buffers live. Inputs are always made on the host (the
// patterns of pattern.h) and outputs are always checked there; a Buffer is
// what weft's calls see: the host bytes themselves, or CUDA device memory
// that the inputs are copied into and the outputs copied back out of.
//
//   ASSIGN_OR_RETURN(Buffer send, Buffer::Make(weftMemoryCuda, bytes));
//   RETURN_IF_ERROR(send.Upload(host.data()));   ... weftAllReduce(send.data(), ...) ...
//   RETURN_IF_ERROR(Finish(weftMemoryCuda, 10000));      // the collective is done on the device
//   RETURN_IF_ERROR(recv.Download(host.data()));
//
// The CUDA half (memory_cuda.cc) is built only where libweft is built with
// CUDA; elsewhere memory_host.cc refuses CUDA memory with the reason.
#ifndef WEFT_BENCH_CHECK_MEMORY_H_
#define WEFT_BENCH_CHECK_MEMORY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weft/weft.h"

namespace weft_check {

class Buffer {
 public:
  Buffer() = default;
  static absl::StatusOr<Buffer> Make(weftMemoryKind_t kind, size_t bytes);
  void* data() const { return data_.get(); }
  size_t size() const { return bytes_; }
  // Host -> buffer and buffer -> host, all of it; they wait for the copy.
  absl::Status Upload(const void* host) const;
  absl::Status Download(void* host) const;
  // Every byte 0xff, so that an element nobody writes shows as wrong.
  absl::Status Poison() const;

 private:
  weftMemoryKind_t kind_ = weftMemoryHost;
  size_t bytes_ = 0;
  std::shared_ptr<unsigned char> data_;
};

// Why CUDA memory cannot be checked from this process, or OK: this build
// has CUDA and the runtime finds a device.
absl::Status CudaUsable();
// The calling thread works on CUDA device `device` from now on.
absl::Status UseDevice(int device);
// Waits until the collectives issued on the legacy default stream are done
// (CUDA memory; nothing for host memory, whose collectives block), for at
// most `timeout_ms`: a collective still running on the device then is a
// hang, reported as DeadlineExceeded.
absl::Status Finish(weftMemoryKind_t kind, int timeout_ms);

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_MEMORY_H_
