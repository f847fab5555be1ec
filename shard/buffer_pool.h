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
#ifndef WEFT_SHARD_BUFFER_POOL_H_
#define WEFT_SHARD_BUFFER_POOL_H_

#include <cstddef>
#include <map>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

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

  // A 64-byte aligned buffer of at least `bytes` (a pooled one of the same size when there is one).
  absl::StatusOr<void*> Get(size_t bytes);
  // Returns a buffer from Get. Thread-safe (host streams return buffers from their threads).
  void Put(void* p);
  // Frees every pooled buffer (live ones are unaffected).
  void Trim();
  PoolStats stats() const;

 private:
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;            // size -> buffer
  absl::flat_hash_map<void*, size_t> live_;      // buffer -> size
  PoolStats stats_;
};

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_BUFFER_POOL_H_
