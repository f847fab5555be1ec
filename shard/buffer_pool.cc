#include "shard/buffer_pool.h"

#include <algorithm>
#include <cstdlib>

#include "core/status.h"

namespace weft {
namespace shard {
namespace {
constexpr size_t kAlign = 64;
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

BufferPool::~BufferPool() {
  Trim();
  for (auto& [size, p] : stream_free_) std::free(p);
}

absl::StatusOr<void*> BufferPool::Get(size_t bytes, HostStream* stream) {
  const size_t size = RoundUp(std::max<size_t>(bytes, 1));
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  if (stream != nullptr) {
    // A buffer returned on this very stream: its last use runs before ours.
    auto [lo, hi] = stream_free_.equal_range(size);
    for (auto it = lo; it != hi; ++it) {
      if (stream_of_.at(it->second).stream != stream) continue;
      p = it->second;
      stream_of_.erase(p);
      stream_free_.erase(it);
      stats_.pooled_bytes -= size;
      break;
    }
  }
  if (p != nullptr) {
  } else if (auto it = free_.find(size); it != free_.end()) {
    p = it->second;
    free_.erase(it);
    stats_.pooled_bytes -= size;
  } else {
    p = std::aligned_alloc(kAlign, size);
    if (p == nullptr) return SystemError("out of host memory allocating %zu bytes", size);
  }
  live_[p] = size;
  stats_.live_bytes += size;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  return p;
}

void BufferPool::Put(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) return;  // not ours: ignore rather than corrupt the accounting
  const size_t size = it->second;
  live_.erase(it);
  stats_.live_bytes -= size;
  stats_.pooled_bytes += size;
  free_.emplace(size, p);
}

void BufferPool::PutOnStream(void* p, HostStream* stream) {
  if (stream == nullptr) return Put(p);
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    const size_t size = it->second;
    live_.erase(it);
    stats_.live_bytes -= size;
    stats_.pooled_bytes += size;
    token = ++next_token_;
    stream_free_.emplace(size, p);
    stream_of_[p] = {stream, token, size};
  }
  stream->Enqueue([this, p, token] {
    ReleaseToHost(p, token);
    return absl::OkStatus();
  });
}

void BufferPool::ReleaseToHost(void* p, uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  auto s = stream_of_.find(p);
  if (s == stream_of_.end() || s->second.token != token) return;  // reused on the stream meanwhile
  const size_t size = s->second.size;
  stream_of_.erase(s);
  for (auto [it, hi] = stream_free_.equal_range(size); it != hi; ++it) {
    if (it->second != p) continue;
    stream_free_.erase(it);
    free_.emplace(size, p);
    return;
  }
}

void BufferPool::Trim() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, p] : free_) std::free(p);
  free_.clear();
  stats_.pooled_bytes = 0;
}

PoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace shard
}  // namespace weft
