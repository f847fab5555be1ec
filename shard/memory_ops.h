// The memory operations under a shard group's steps, on host or CUDA memory.
//
// The shard group, its buffer pool and its full-state copies are written
// once against this interface; what differs between memories sits in two
// small implementations:
//
//   host (memory_host.cc)   aligned_alloc / memset / memcpy, run now when
//                           `stream` is nullptr, else enqueued on the
//                           HostStream* `stream`; the pool's free lists do
//                           the stream-ordered reuse (shard/buffer_pool.h);
//   CUDA (memory_device.cc) the device runtime's stream-ordered allocator
//                           (cudaMallocAsync semantics: memory freed on a
//                           stream is reused by later work on that stream, or
//                           on streams ordered after it), MemsetAsync and
//                           CopyAsync on the cudaStream_t `stream` (nullptr:
//                           the legacy default stream), on one device.
//
// So the host tests exercise every step a CUDA group takes, and the device
// side stays a list of runtime calls.
//
//   ASSIGN_OR_RETURN(std::shared_ptr<const MemoryOps> mem, MemoryOpsFor(*comm));
//   CurrentDevice on(*mem);                 // CUDA: the group's device is current
//   RETURN_IF_ERROR(on.status());
//   ASSIGN_OR_RETURN(void* p, mem->Alloc(bytes, stream));
//   RETURN_IF_ERROR(mem->Zero(p, bytes, stream));
//   mem->Free(p, stream);                   // once `stream` has run what is enqueued so far
#ifndef WEFT_SHARD_MEMORY_OPS_H_
#define WEFT_SHARD_MEMORY_OPS_H_

#include <cstddef>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/device_runtime.h"
#include "core/dtype.h"

namespace weft {
namespace shard {

class MemoryOps {
 public:
  virtual ~MemoryOps() = default;
  virtual MemKind kind() const = 0;
  virtual int device() const { return -1; }  // CUDA: the device ordinal
  // OK when `stream` is a stream of this memory (host: nullptr or a live
  // HostStream; CUDA: anything but a HostStream). `what` names the argument.
  virtual absl::Status CheckStream(const char* what, void* stream) const = 0;
  // True when Alloc and Free reuse memory themselves, in stream order (the
  // device's pool): BufferPool then only counts bytes.
  virtual bool stream_ordered() const = 0;
  // `bytes` usable by work enqueued on `stream` from now on (host: at once).
  virtual absl::StatusOr<void*> Alloc(size_t bytes, void* stream) const = 0;
  // Frees `p` once `stream` has run what is enqueued on it so far.
  virtual void Free(void* p, void* stream) const = 0;
  virtual absl::Status Zero(void* p, size_t bytes, void* stream) const = 0;
  // Any direction the memory allows (CUDA: host or device on either side).
  virtual absl::Status Copy(void* dst, const void* src, size_t bytes, void* stream) const = 0;
  // Blocks until `stream`'s work so far has run (that stream only); returns
  // the stream's pending error, if any.
  virtual absl::Status Synchronize(void* stream) const = 0;
  // A stream of the group's own, for the steps documented as blocking (host:
  // nullptr, which runs them synchronously).
  virtual absl::StatusOr<void*> CreateStream() const = 0;
  virtual void DestroyStream(void* stream) const = 0;
};

// The host implementation (a process-wide instance).
std::shared_ptr<const MemoryOps> HostMemoryOps();
// The CUDA implementation on `device`; Unsupported without CUDA in the build.
absl::StatusOr<std::shared_ptr<const MemoryOps>> DeviceMemoryOps(int device);
// The memory of `comm`: host, or CUDA on the communicator's device
// (cuda_device, else the current one). Unsupported, naming `who`, when the
// build or the machine has no CUDA.
absl::StatusOr<std::shared_ptr<const MemoryOps>> MemoryOpsFor(const Communicator& comm, const char* who);

// Makes a CUDA memory's device current for the scope (nothing for host).
class CurrentDevice {
 public:
  explicit CurrentDevice(const MemoryOps& mem);
  const absl::Status& status() const { return status_; }

 private:
  std::optional<DeviceScope> scope_;
  absl::Status status_;
};

// True when `p` (as core/memory.h classifies it) may be given to work on
// `mem`'s memory: managed memory suits both.
bool Usable(const MemoryOps& mem, const void* p);

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_MEMORY_OPS_H_
