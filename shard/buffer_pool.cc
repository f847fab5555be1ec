#include "shard/buffer_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/status.h"

namespace weft {
namespace shard {
namespace {
constexpr size_t kPoolAlign = 64;
size_t RoundUp(size_t n) { return (n + kPoolAlign - 1) / kPoolAlign * kPoolAlign; }
}  // namespace

BufferPool::~BufferPool() {
  Trim();
  for (auto& [size, p] : stream_free_) mem_->Free(p, nullptr);
}

absl::Status BufferPool::Bind(std::shared_ptr<const MemoryOps> mem) {
  if (mem == nullptr) return InvalidArgument("mem is NULL");
  std::lock_guard<std::mutex> lock(mu_);
  if (mem->kind() == mem_->kind() && mem->device() == mem_->device()) return absl::OkStatus();
  if (!live_.empty() || !free_.empty() || !stream_free_.empty()) {
    return InvalidUsage("the buffer pool holds %s memory%s (%zu bytes live, %zu pooled): it cannot serve %s memory%s",
                        Name(mem_->kind()), mem_->device() >= 0 ? absl::StrFormat(" of device %d", mem_->device()) : "",
                        stats_.live_bytes, stats_.pooled_bytes, Name(mem->kind()),
                        mem->device() >= 0 ? absl::StrFormat(" of device %d", mem->device()) : "");
  }
  mem_ = std::move(mem);
  return absl::OkStatus();
}

MemKind BufferPool::memory() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mem_->kind();
}

absl::StatusOr<void*> BufferPool::Get(size_t bytes, void* stream) {
  const size_t size = RoundUp(std::max<size_t>(bytes, 1));
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  if (mem_->stream_ordered()) {
    // The device's allocator reuses in stream order itself.
    ASSIGN_OR_RETURN(p, mem_->Alloc(size, stream));
  } else if (stream != nullptr) {
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
    ASSIGN_OR_RETURN(p, mem_->Alloc(size, stream));
  }
  live_[p] = size;
  stats_.live_bytes += size;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  return p;
}

bool BufferPool::Unlive(void* p, size_t* size) {
  auto it = live_.find(p);
  if (it == live_.end()) return false;  // not ours: ignore rather than corrupt the accounting
  *size = it->second;
  live_.erase(it);
  stats_.live_bytes -= *size;
  return true;
}

void BufferPool::PutOnStream(void* p, void* stream) {
  if (p == nullptr) return;
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t size = 0;
    if (!Unlive(p, &size)) return;
    if (mem_->stream_ordered()) {
      mem_->Free(p, stream);
      return;
    }
    stats_.pooled_bytes += size;
    if (stream == nullptr) {
      free_.emplace(size, p);
      return;
    }
    token = ++next_token_;
    stream_free_.emplace(size, p);
    stream_of_[p] = {static_cast<HostStream*>(stream), token, size};
  }
  static_cast<HostStream*>(stream)->Enqueue([this, p, token] {
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
  for (auto& [size, p] : free_) {
    mem_->Free(p, nullptr);
    stats_.pooled_bytes -= size;  // what streams still hold stays pooled
  }
  free_.clear();
}

PoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace shard
}  // namespace weft
