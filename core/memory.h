// Which memory a pointer lives in.
//
// Shared code asks ClassifyPointer(p) and never includes a CUDA header: when
// weft is built with CUDA, the CUDA runtime module installs a classifier at
// load time (cudaPointerGetAttributes); without it every pointer is host
// memory. Used to refuse a device pointer given to a host backend, and the
// reverse, with a clear error rather than a crash.
#ifndef WEFT_CORE_MEMORY_H_
#define WEFT_CORE_MEMORY_H_

#include "core/dtype.h"

namespace weft {

enum class PointerKind : int { kHost = 0, kDevice = 1, kManaged = 2 };

using PointerClassifier = PointerKind (*)(const void* p);

// kHost for NULL and for anything when no classifier is installed.
PointerKind ClassifyPointer(const void* p);
void SetPointerClassifier(PointerClassifier fn);

// True when a pointer of kind `k` may be handed to work on memory kind `m`
// (managed memory is usable from both).
inline bool Compatible(PointerKind k, MemKind m) {
  return k == PointerKind::kManaged || (k == PointerKind::kDevice) == (m == MemKind::kCuda);
}
const char* Name(PointerKind k);

}  // namespace weft

#endif  // WEFT_CORE_MEMORY_H_
