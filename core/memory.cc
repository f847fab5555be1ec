#include "core/memory.h"

#include <atomic>

namespace weft {
namespace {
std::atomic<PointerClassifier> g_classifier{nullptr};
}  // namespace

PointerKind ClassifyPointer(const void* p) {
  const PointerClassifier fn = g_classifier.load(std::memory_order_acquire);
  if (p == nullptr || fn == nullptr) return PointerKind::kHost;
  return fn(p);
}

void SetPointerClassifier(PointerClassifier fn) { g_classifier.store(fn, std::memory_order_release); }

const char* Name(PointerKind k) {
  switch (k) {
    case PointerKind::kHost: return "host";
    case PointerKind::kDevice: return "device";
    case PointerKind::kManaged: return "managed";
  }
  return "invalid";
}

}  // namespace weft
