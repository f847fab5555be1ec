// The reducer on CUDA memory: its communication stream, the events that
// order that stream after the callers' streams, and its device memory.
//
// Names: the "comm stream" is the reducer's own non-blocking stream, where
// every bucket's copy-in, all-reduce and copy-out run; a "caller stream" is
// whatever stream the framework passes to MarkReady or Finalize (nullptr is
// the legacy default stream). The ordering, with no device-wide
// synchronisation and no host wait:
//   MarkReady(g, grad, s)   records g's event on s: the gradient is final
//                           there (Produced);
//   a bucket's launch       the comm stream waits for the latest event of
//                           each caller stream among the bucket's gradients
//                           (WaitProduced), then flatten (1/N fused), the
//                           all-reduce and unflatten are enqueued on it;
//   Finalize(s)             s waits for an event recorded on the comm stream
//                           after the last copy-out (Handoff).
// Bucket memory comes from the device's stream-ordered pool on the comm
// stream, zero-filled there, and goes back to it on the comm stream (at a
// rebuild, after the old slots were copied over, and at Destroy). Copy plans
// the reducer replaced (new gradient pointers) are kept here (Retire): a run
// of them may still be queued on the comm stream, and destroying a device
// plan waits for the whole device (kernels/copy_plan.h), which the hot path
// must not do at every change of pointers.
//
//   ASSIGN_OR_RETURN(auto dev, DeviceSide::Create(device, num_grads));
//   RETURN_IF_ERROR(dev->Produced(g, caller_stream));    // MarkReady
//   RETURN_IF_ERROR(dev->WaitProduced(bucket_grads));    // launch
//   RETURN_IF_ERROR(dev->Handoff(caller_stream));        // Finalize
#ifndef WEFT_SHARD_REDUCER_DEVICE_H_
#define WEFT_SHARD_REDUCER_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device_runtime.h"
#include "kernels/copy_plan.h"

namespace weft {
namespace shard {

class DeviceSide {
 public:
  // Needs the CUDA runtime (Unsupported in a build without CUDA, or without a
  // usable device) and makes `device` current while creating.
  static absl::StatusOr<std::unique_ptr<DeviceSide>> Create(int device, int num_grads);
  // Waits for the comm stream (that stream only), then destroys it; retired
  // plans, if any, wait for the whole device as they go.
  ~DeviceSide();
  DeviceSide(const DeviceSide&) = delete;
  DeviceSide& operator=(const DeviceSide&) = delete;

  const DeviceRuntime* rt() const { return rt_; }
  int device() const { return device_; }
  void* stream() const { return stream_; }

  // Gradient g became final on `caller` (its latest mark).
  absl::Status Produced(int g, void* caller);
  // The comm stream waits for the producers of `grads` (those marked).
  absl::Status WaitProduced(absl::Span<const int> grads);
  // The comm stream waits for the work enqueued on `caller` so far.
  absl::Status After(void* caller);
  // `caller` waits for the work enqueued on the comm stream so far.
  absl::Status Handoff(void* caller);
  // Blocks the host until the comm stream's work so far is done.
  absl::Status Synchronize();

  // Keeps a replaced copy plan until destruction, when the comm stream has
  // finished. Past kMaxRetired plans all of them are destroyed at once: one
  // wait for the whole device (cudaDeviceSynchronize, in the plans'
  // destructor) per kMaxRetired / 2 rebuilds of a bucket's plan pair, which
  // bounds the device memory their launch tables hold.
  void Retire(kernels::CopyPlan plan);
  static constexpr size_t kMaxRetired = 32;

  // Zero-filled device memory, ordered on the comm stream.
  absl::StatusOr<void*> Alloc(size_t bytes);
  void Free(void* p);  // after the comm stream's work so far
  absl::Status Zero(void* p, size_t bytes);
  absl::Status Copy(void* dst, const void* src, size_t bytes);

 private:
  DeviceSide(const DeviceRuntime* rt, int device) : rt_(rt), device_(device) {}

  const DeviceRuntime* const rt_;
  const int device_;
  void* stream_ = nullptr;
  void* sync_event_ = nullptr;      // After and Handoff
  std::vector<void*> events_;       // per gradient, created at its first mark
  std::vector<void*> producer_;     // per gradient: the caller stream of its latest mark
  std::vector<uint64_t> marked_at_; // per gradient: when (a counter), to find each stream's latest event
  uint64_t marks_ = 0;
  std::vector<kernels::CopyPlan> retired_;
};

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_REDUCER_DEVICE_H_
