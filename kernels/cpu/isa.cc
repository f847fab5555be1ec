#include "kernels/cpu/isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "core/env.h"

namespace weft {
namespace kernels {
namespace cpu {

const Isa& BestIsa() {
  static const Isa& isa = []() -> const Isa& {
    const Isa* best = Avx512Isa();
    if (best == nullptr) best = Avx2Isa();
    if (best == nullptr) best = &PortableIsa();
    Log(LogLevel::kInfo, "host kernels: %s", best->name);
    return *best;
  }();
  return isa;
}

bool CpuHasF16c() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
#else
  return false;
#endif
}

}  // namespace cpu
}  // namespace kernels
}  // namespace weft
