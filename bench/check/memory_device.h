// The CUDA runtime calls behind Buffer (memory.h): memory_cuda.cc where
// libweft is built with CUDA, memory_nocuda.cc (every call refused with the
// reason) elsewhere. Only memory_common.cc includes this.
#ifndef WEFT_BENCH_CHECK_MEMORY_DEVICE_H_
#define WEFT_BENCH_CHECK_MEMORY_DEVICE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/status.h"

namespace weft_check {
namespace device {

absl::Status Usable();
absl::Status Use(int device);
absl::StatusOr<void*> Alloc(size_t bytes);
void Free(void* p);
absl::Status Copy(void* to, const void* from, size_t bytes, bool to_device);
absl::Status Fill(void* p, int byte, size_t bytes);
absl::Status Synchronize(int timeout_ms);

}  // namespace device
}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_MEMORY_DEVICE_H_
