// A weft-check built without CUDA: host memory only.
#include "bench/check/memory_device.h"

namespace weft_check {
namespace device {

namespace {

absl::Status NotBuilt() {
  return weft::Unsupported("--memory cuda: this weft-check and its libweft were built without CUDA, so they have no "
                           "device buffers and no NCCL to check; rebuild with meson -Dcuda=enabled -Dnccl=enabled, or "
                           "check host memory (--memory host)");
}

}  // namespace

absl::Status Usable() { return NotBuilt(); }
absl::Status Use(int) { return NotBuilt(); }
absl::StatusOr<void*> Alloc(size_t) { return NotBuilt(); }
void Free(void*) {}
absl::Status Copy(void*, const void*, size_t, bool) { return NotBuilt(); }
absl::Status Fill(void*, int, size_t) { return NotBuilt(); }
absl::Status Synchronize(int) { return NotBuilt(); }

}  // namespace device
}  // namespace weft_check
