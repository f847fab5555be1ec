// A pool of host buffers reused by size, with the byte accounting the
// sharder reports (live, pooled, peak).
//
// Unsharded parameters and reduce-scatter inputs are large and short-lived:
// reshard returns them here rather than to malloc, so the next group's
// unshard reuses the memory and peak usage stays at what is live.
//
//   ASSIGN_OR_RETURN(void* buf, pool.Get(bytes));
//   ...
//   pool.Put(buf);   // back to the free list; live bytes drop at once
//
// Stream-ordered reuse (the semantics of cudaFreeAsync and of PyTorch's
// caching allocator): a buffer that work already enqueued on a host stream
// still uses is returned with PutOnStream. Work enqueued on that stream later
// runs after that use, so Get(bytes, stream) may hand the buffer out again at
// once; a Get for the host (no stream) gets it only once the stream has
// passed the returning point. This is what lets the next group's prefetched
// all-gather land in the memory of the gradients being reduce-scattered just
// before it, instead of needing a buffer of its own.
//
//   pool.PutOnStream(grads, &stream);                 // its reduce-scatter is enqueued
//   ASSIGN_OR_RETURN(void* next, pool.Get(bytes, &stream));   // may be `grads`
#ifndef WEFT_SHARD_BUFFER_POOL_H_
#define WEFT_SHARD_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/stream.h"

namespace weft {
namespace shard {

struct PoolStats {
  size_t live_bytes = 0;    // handed out and not yet returned
  size_t pooled_bytes = 0;  // returned, kept for reuse
  size_t peak_live_bytes = 0;
};

class BufferPool {
 public:
  BufferPool() = default;
  ~BufferPool();  // frees the pooled buffers; live ones must have been returned
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A 64-byte aligned buffer of at least `bytes` (a pooled one of the same
  // size when there is one). With `stream`: the buffer is only used by work
  // enqueued on `stream` from now on, so one returned on it may be reused.
  absl::StatusOr<void*> Get(size_t bytes, HostStream* stream = nullptr);
  // Returns a buffer from Get. Thread-safe (host streams return buffers from their threads).
  void Put(void* p);
  // Returns a buffer that work enqueued on `stream` so far still uses (see
  // above). The stream must outlive its queued work, the pool the stream.
  void PutOnStream(void* p, HostStream* stream);
  // Frees every pooled buffer (live ones are unaffected).
  void Trim();
  PoolStats stats() const;

 private:
  mutable std::mutex mu_;
  struct StreamFree {
    HostStream* stream;
    uint64_t token;  // which PutOnStream: a reused and returned-again buffer has a newer one
    size_t size;
  };
  void ReleaseToHost(void* p, uint64_t token);

  std::multimap<size_t, void*> free_;            // size -> buffer
  absl::flat_hash_map<void*, size_t> live_;      // buffer -> size
  // Returned on a stream that has not yet passed the returning point: size -> buffer, and its stream.
  std::multimap<size_t, void*> stream_free_;
  absl::flat_hash_map<void*, StreamFree> stream_of_;
  uint64_t next_token_ = 0;
  PoolStats stats_;
};

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_BUFFER_POOL_H_
