// The CUDA runtime as shared code sees it: streams, events and stream-ordered
// memory, without a CUDA header.
//
// Code that must order device work (the DDP reducer's communication stream,
// host buffers staged through device memory for a collective) calls the
// runtime installed here, as kernels/device.h does for the kernels: the CUDA
// module (core/cuda/device_runtime.cc) registers itself at load time, and in
// a build without CUDA GetDeviceRuntime() is nullptr, so callers refuse
// device work with a message instead of asking which build they are in.
// Streams and events are cudaStream_t and cudaEvent_t passed as void*;
// nullptr is the legacy default stream. Every call acts on the current
// device (DeviceScope makes one current). Errors name the CUDA call, and a
// missing driver or device is Unsupported (core/cuda/runtime.h).
//
//   ASSIGN_OR_RETURN(const DeviceRuntime* rt, RequireDeviceRuntime("the reducer"));
//   DeviceScope on(rt, device);
//   RETURN_IF_ERROR(on.status());
//   ASSIGN_OR_RETURN(void* s, rt->CreateStream());
//   RETURN_IF_ERROR(rt->Record(ev, caller_stream));
//   RETURN_IF_ERROR(rt->Wait(s, ev));   // s runs after the caller's work so far
#ifndef WEFT_CORE_DEVICE_RUNTIME_H_
#define WEFT_CORE_DEVICE_RUNTIME_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weft {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // Unsupported, with the driver's reason, when no device is usable.
  virtual absl::StatusOr<int> DeviceCount() const = 0;
  virtual absl::StatusOr<int> CurrentDevice() const = 0;
  virtual absl::Status SetDevice(int device) const = 0;

  // A stream that does not synchronise with the legacy default stream.
  virtual absl::StatusOr<void*> CreateStream() const = 0;
  virtual void DestroyStream(void* stream) const = 0;
  // Blocks the calling thread until `stream`'s work so far is done (that
  // stream only, never the whole device).
  virtual absl::Status SynchronizeStream(void* stream) const = 0;

  // An event without timing.
  virtual absl::StatusOr<void*> CreateEvent() const = 0;
  virtual void DestroyEvent(void* event) const = 0;
  // Captures the work enqueued on `stream` so far.
  virtual absl::Status Record(void* event, void* stream) const = 0;
  // Work enqueued on `stream` from now on runs after `event`'s captured work;
  // the host does not wait.
  virtual absl::Status Wait(void* stream, void* event) const = 0;

  // Stream-ordered memory (the device's caching pool): usable by work on
  // `stream` after the call, and by other streams ordered after it.
  virtual absl::StatusOr<void*> AllocAsync(size_t bytes, void* stream) const = 0;
  // Returned once `stream` reaches this point.
  virtual absl::Status FreeAsync(void* p, void* stream) const = 0;
  virtual absl::Status MemsetAsync(void* p, int value, size_t bytes, void* stream) const = 0;
  // Any direction (host or device on either side). A copy to pageable host
  // memory returns only when it is done; one from it, once the source is read.
  virtual absl::Status CopyAsync(void* dst, const void* src, size_t bytes, void* stream) const = 0;
};

// Installs `r` (which must outlive the process); returns true so it can
// initialise a static.
bool RegisterDeviceRuntime(const DeviceRuntime* r);
// nullptr in a build without CUDA.
const DeviceRuntime* GetDeviceRuntime();
// The runtime, or Unsupported "<who> on CUDA memory needs weft built with CUDA".
absl::StatusOr<const DeviceRuntime*> RequireDeviceRuntime(const char* who);

// Makes `device` current for the scope's lifetime and restores the previous
// one after; status() says whether switching worked.
class DeviceScope {
 public:
  DeviceScope(const DeviceRuntime* rt, int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  const DeviceRuntime* rt_;
  int saved_ = -1;
  absl::Status status_;
};

}  // namespace weft

#endif  // WEFT_CORE_DEVICE_RUNTIME_H_
