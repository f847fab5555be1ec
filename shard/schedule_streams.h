// How a shard schedule (shard/schedule.h) orders its work, on host or CUDA
// memory.
//
// The schedule decides what to gather, reduce and release, and when; this
// keeps the "when". Names: the "comm stream" carries the schedule's gathers
// and reductions; the "caller" is where the framework computes.
//
//   host   the comm stream is a HostStream; the caller computes on its own
//          thread, so by the time it calls the schedule, what it did is
//          done. A group's gather is a stream mark; Ready blocks until that
//          gather alone has run (not the reductions queued behind it).
//   CUDA   the comm stream is the schedule's own non-blocking stream on the
//          groups' device, the caller a cudaStream_t. A group's gather is an
//          event; Ready makes the caller's stream wait for it (the host does
//          not wait). Before the comm stream gathers shards the optimizer
//          updated, reduces gradients the caller produced, or frees memory
//          the caller read, it waits for an event recorded on the caller's
//          stream (AfterCaller). Memory goes back to the device's allocator
//          on the comm stream, so the next gather there reuses it in stream
//          order (a reduced gradient buffer becomes the next prefetch).
//
//   ASSIGN_OR_RETURN(auto streams, DeviceScheduleStreams(caller_stream));
//   ShardSchedule s(std::move(streams), options);
#ifndef WEFT_SHARD_SCHEDULE_STREAMS_H_
#define WEFT_SHARD_SCHEDULE_STREAMS_H_

#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/stream.h"
#include "shard/shard_group.h"

namespace weft {
namespace shard {

class ScheduleStreams {
 public:
  virtual ~ScheduleStreams() = default;
  virtual MemKind kind() const = 0;
  // OK when g's memory (and CUDA device) suits these streams.
  virtual absl::Status CheckGroup(const char* what, const ShardGroup& g) const = 0;
  // The stream g's steps are enqueued on (CUDA: created on g's device at the
  // first call, ordered after the caller's work so far).
  virtual absl::StatusOr<void*> Comm(const ShardGroup& g) = 0;
  // Where released buffers go back: after this stream's work so far (host:
  // nullptr, at once: the gathers were waited for).
  virtual void* release_stream() const = 0;
  // g's gather was just enqueued on the comm stream.
  virtual absl::Status Gathered(const ShardGroup* g) = 0;
  // The caller may read g's parameters: host: waits for its gather and
  // returns the stream's pending error; CUDA: the caller's stream waits.
  virtual absl::Status Ready(const ShardGroup* g) = 0;
  // When g's latest gather completed on the comm stream (host: the stream's
  // timing, core/stream.h ReachedAt); not before Ready(g) returned. CUDA:
  // Unsupported (the events carry no timing: profile with CUDA's tools).
  virtual absl::StatusOr<std::chrono::steady_clock::time_point> GatheredAt(const ShardGroup* g) = 0;
  // As Ready, without surfacing errors: g's buffers are about to be released.
  virtual void Settle(const ShardGroup* g) = 0;
  // The comm stream's later work runs after the caller's work so far.
  virtual absl::Status AfterCaller() = 0;
  // The caller's later work runs after the comm stream's work so far (host: blocks).
  virtual void Handoff() = 0;
  // End of a step: Handoff; host: returns (and clears) the first error of
  // the stream's work. CUDA errors surface as the communicators' async errors.
  virtual absl::Status EndStep() = 0;
  // Destruction: waits for the comm stream (that stream only).
  virtual void Finish() = 0;
  // Host: the stream was destroyed before the schedule; touch it no more.
  virtual void CallerStreamGone() {}
};

// `stream` must outlive the schedule, or be reported gone (CallerStreamGone).
std::unique_ptr<ScheduleStreams> HostScheduleStreams(HostStream* stream);
// `caller`: the framework's cudaStream_t (nullptr: the legacy default
// stream). Unsupported without CUDA in the build or a usable device.
absl::StatusOr<std::unique_ptr<ScheduleStreams>> DeviceScheduleStreams(void* caller);

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_SCHEDULE_STREAMS_H_
