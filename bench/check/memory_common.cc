// The host side of Buffer, shared by the builds with and without CUDA.
#include <cstring>

#include "bench/check/memory.h"
#include "bench/check/memory_device.h"

namespace weft_check {

absl::StatusOr<Buffer> Buffer::Make(weftMemoryKind_t kind, size_t bytes) {
  Buffer b;
  b.kind_ = kind;
  b.bytes_ = bytes;
  const size_t n = bytes == 0 ? 1 : bytes;  // never a NULL buffer, as weft refuses those for non-empty calls
  if (kind == weftMemoryHost) {
    b.data_.reset(new unsigned char[n], std::default_delete<unsigned char[]>());
    return b;
  }
  ASSIGN_OR_RETURN(void* p, device::Alloc(n));
  b.data_.reset(static_cast<unsigned char*>(p), [](unsigned char* q) { device::Free(q); });
  return b;
}

absl::Status Buffer::Upload(const void* host) const {
  if (kind_ == weftMemoryHost) {
    std::memcpy(data_.get(), host, bytes_);
    return absl::OkStatus();
  }
  return device::Copy(data_.get(), host, bytes_, /*to_device=*/true);
}

absl::Status Buffer::Download(void* host) const {
  if (kind_ == weftMemoryHost) {
    std::memcpy(host, data_.get(), bytes_);
    return absl::OkStatus();
  }
  return device::Copy(host, data_.get(), bytes_, /*to_device=*/false);
}

absl::Status Buffer::Poison() const {
  if (kind_ == weftMemoryHost) {
    std::memset(data_.get(), 0xff, bytes_);
    return absl::OkStatus();
  }
  return device::Fill(data_.get(), 0xff, bytes_);
}

absl::Status Finish(weftMemoryKind_t kind, int timeout_ms) {
  return kind == weftMemoryHost ? absl::OkStatus() : device::Synchronize(timeout_ms);
}

absl::Status CudaUsable() { return device::Usable(); }
absl::Status UseDevice(int device) { return device::Use(device); }

}  // namespace weft_check
