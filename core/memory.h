// Which memory a pointer lives in.
//
// Shared code asks ClassifyPointer(p) and never includes a CUDA header: when
// weft is built with CUDA, the CUDA runtime module installs a classifier at
// load time (cudaPointerGetAttributes); without it every pointer is host
// memory. Used to refuse a device pointer given to a host backend, and the
// reverse, with a clear error rather than a crash.
//
// A host-only job never touches the CUDA driver, even in a CUDA build: a
// classifier that asks the driver (the CUDA module's) is asked only once
// the driver library is mapped into the process (by weft's own CUDA work or
// by the framework's), since no pointer can be device memory before that.
// Until then a pointer costs a look at the loader's count of loaded
// objects, no system call.
#ifndef WEFT_CORE_MEMORY_H_
#define WEFT_CORE_MEMORY_H_

#include "core/dtype.h"

namespace weft {

enum class PointerKind : int { kHost = 0, kDevice = 1, kManaged = 2 };

using PointerClassifier = PointerKind (*)(const void* p);

// kHost for NULL, for anything when no classifier is installed, and for
// anything while the CUDA driver is not loaded.
PointerKind ClassifyPointer(const void* p);
// Whether the CUDA driver (libcuda.so*) is mapped into this process; once
// true, true for good.
bool CudaDriverLoaded();
// `needs_driver`: `fn` calls the CUDA driver, so it is asked only once
// CudaDriverLoaded(); otherwise (tests' fakes) it is always asked. Returns
// the classifier installed before.
PointerClassifier SetPointerClassifier(PointerClassifier fn, bool needs_driver = false);

// True when a pointer of kind `k` may be handed to work on memory kind `m`
// (managed memory is usable from both).
inline bool Compatible(PointerKind k, MemKind m) {
  return k == PointerKind::kManaged || (k == PointerKind::kDevice) == (m == MemKind::kCuda);
}
const char* Name(PointerKind k);

}  // namespace weft

#endif  // WEFT_CORE_MEMORY_H_
