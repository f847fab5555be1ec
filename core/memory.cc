#include "core/memory.h"

#include <link.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace weft {
namespace {

std::atomic<PointerClassifier> g_classifier{nullptr};
std::atomic<bool> g_needs_driver{false};

// Whether the CUDA driver (libcuda.so*) is mapped into this process. A
// device or managed pointer can exist only once something loaded it, so
// until then every pointer is host memory and the classifier, whose first
// runtime call would load the driver and make a context, is not asked. The
// loader's count of objects ever loaded (dlpi_adds, read from the first
// object alone) says when a walk of the list could find something new.
struct DriverWatch {
  std::mutex mu;                              // one walk at a time
  std::atomic<unsigned long long> adds{0};    // the count at the last walk
  std::atomic<bool> loaded{false};
};

DriverWatch& Watch() {
  static DriverWatch* w = new DriverWatch();  // never destroyed: asked from any thread until exit
  return *w;
}

int FirstAdds(struct dl_phdr_info* info, size_t, void* out) {
  *static_cast<unsigned long long*>(out) = info->dlpi_adds;
  return 1;  // the count is the same in every entry: stop at the first
}

int FindDriver(struct dl_phdr_info* info, size_t, void*) {
  const char* name = info->dlpi_name;
  if (name == nullptr) return 0;
  const char* base = std::strrchr(name, '/');
  base = base != nullptr ? base + 1 : name;
  return std::strncmp(base, "libcuda.so", 10) == 0 ? 1 : 0;
}

}  // namespace

bool CudaDriverLoaded() {
  DriverWatch& w = Watch();
  if (w.loaded.load(std::memory_order_acquire)) return true;  // a driver is never unloaded
  unsigned long long adds = 0;
  dl_iterate_phdr(&FirstAdds, &adds);
  if (adds == w.adds.load(std::memory_order_acquire)) return false;  // nothing loaded since the last walk
  std::lock_guard<std::mutex> lock(w.mu);
  if (dl_iterate_phdr(&FindDriver, nullptr) != 0) w.loaded.store(true, std::memory_order_release);
  w.adds.store(adds, std::memory_order_release);
  return w.loaded.load(std::memory_order_acquire);
}

PointerKind ClassifyPointer(const void* p) {
  const PointerClassifier fn = g_classifier.load(std::memory_order_acquire);
  if (p == nullptr || fn == nullptr) return PointerKind::kHost;
  if (g_needs_driver.load(std::memory_order_relaxed) && !CudaDriverLoaded()) return PointerKind::kHost;
  return fn(p);
}

PointerClassifier SetPointerClassifier(PointerClassifier fn, bool needs_driver) {
  g_needs_driver.store(needs_driver, std::memory_order_relaxed);
  return g_classifier.exchange(fn, std::memory_order_acq_rel);
}

const char* Name(PointerKind k) {
  switch (k) {
    case PointerKind::kHost: return "host";
    case PointerKind::kDevice: return "device";
    case PointerKind::kManaged: return "managed";
  }
  return "invalid";
}

}  // namespace weft
