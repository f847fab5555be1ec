#include "core/env.h"
#include "kernels/cpu/isa.h"

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

}  // namespace cpu
}  // namespace kernels
}  // namespace weft
