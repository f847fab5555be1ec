// A pool of buffers reused by size, with the byte accounting the sharder
// reports (live, pooled, peak), on the memory of shard/memory_ops.h.
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
//
// On CUDA memory (Bind to a device's MemoryOps) the device's stream-ordered
// allocator already follows that rule (cudaMallocAsync / cudaFreeAsync on the
// cudaStream_t `stream`, nullptr the legacy default stream), and caches what
// is freed: the pool hands Get and Put straight to it and only counts, so
// pooled_bytes stays 0 (the driver's cache is not weft's to report).
#ifndef WEFT_SHARD_BUFFER_POOL_H_
#define WEFT_SHARD_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/stream.h"
#include "shard/memory_ops.h"

namespace weft {
namespace shard {

struct PoolStats {
  size_t live_bytes = 0;    // handed out and not yet returned
  size_t pooled_bytes = 0;  // returned, kept for reuse
  size_t peak_live_bytes = 0;
};

class BufferPool {
 public:
  BufferPool() : mem_(HostMemoryOps()) {}
  ~BufferPool();  // frees the pooled buffers; live ones must have been returned
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The memory the pool hands out (host until bound). Binding to another
  // memory (or another device) is refused while the pool holds buffers.
  absl::Status Bind(std::shared_ptr<const MemoryOps> mem);
  MemKind memory() const;

  // A 64-byte aligned buffer of at least `bytes` (a pooled one of the same
  // size when there is one). With `stream` (host: a HostStream*; CUDA: a
  // cudaStream_t): the buffer is only used by work enqueued on `stream` from
  // now on, so one returned on it may be reused.
  absl::StatusOr<void*> Get(size_t bytes, void* stream = nullptr);
  // Returns a buffer from Get that no work uses any more. Thread-safe (host
  // streams return buffers from their threads).
  void Put(void* p) { PutOnStream(p, nullptr); }
  // Returns a buffer that work enqueued on `stream` so far still uses (see
  // above). The stream must outlive its queued work, the pool the stream.
  void PutOnStream(void* p, void* stream);
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
  // Takes `p` out of live_ (false when it is not ours); returns its size.
  bool Unlive(void* p, size_t* size);

  std::shared_ptr<const MemoryOps> mem_;  // guarded by mu_

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
