#include "kernels/cpu/isa.h"

namespace weft {
namespace kernels {
namespace cpu {
const Isa* Avx2Isa() { return nullptr; }
}  // namespace cpu
}  // namespace kernels
}  // namespace weft
