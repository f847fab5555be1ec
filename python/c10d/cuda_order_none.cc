// CudaOrder where the extension was built without CUDA (torch without CUDA,
// or no CUDA toolkit headers at build time): CUDA tensors are refused.
#include "cuda_order.h"

#include <c10/util/Exception.h>

namespace weft_c10d {

std::unique_ptr<CudaOrder> CudaOrder::Make(int device) {
  TORCH_CHECK(false, "weft: a tensor on cuda:", device, ", but weft's torch backend was built without CUDA "
              "(torch without CUDA, or no CUDA headers when it was built): use CPU tensors");
}

}  // namespace weft_c10d
