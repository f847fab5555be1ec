#include <cstdlib>
#include <cstring>

#include "core/env.h"
#include "kernels/cpu/isa.h"

namespace weft {
namespace kernels {
namespace cpu {
namespace {

const Isa& Choose() {
  const char* want = std::getenv("WEFT_CPU_ISA");
  const bool allow512 = want == nullptr || std::strcmp(want, "avx512") == 0;
  const bool allow2 = allow512 || std::strcmp(want, "avx2") == 0;
  if (allow512 && Avx512Isa() != nullptr) return *Avx512Isa();
  if (allow2 && Avx2Isa() != nullptr) return *Avx2Isa();
  return PortableIsa();
}

}  // namespace

const Isa& BestIsa() {
  static const Isa& isa = [&]() -> const Isa& {
    const Isa& chosen = Choose();
    Log(LogLevel::kInfo, "host kernels: %s", chosen.name);
    return chosen;
  }();
  return isa;
}

}  // namespace cpu
}  // namespace kernels
}  // namespace weft
