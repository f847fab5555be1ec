// int16 <-> int32 on a CUDA stream: how the NCCL backend reduces int16,
// which NCCL has no type for (collectives.cc). Plain CUDA runtime types, no
// Abseil: widen.cu includes it.
//
//   WidenInt16(d_in, d_tmp, n, stream);     // tmp[i] = in[i], sign-extended
//   /* ncclAllReduce(d_tmp, d_tmp, n, ncclInt32, ...) */
//   NarrowToInt16(d_tmp, d_out, n, stream); // out[i] = the low 16 bits of tmp[i]
#ifndef WEFT_COMM_NCCL_WIDEN_H_
#define WEFT_COMM_NCCL_WIDEN_H_

#include <cuda_runtime_api.h>

#include <cstddef>

namespace weft {
namespace nccl {

// Each enqueues one kernel on `stream` on the current device and returns the
// launch's error; n == 0 enqueues nothing.
cudaError_t WidenInt16(const void* src, void* dst, size_t n, cudaStream_t stream);
cudaError_t NarrowToInt16(const void* src, void* dst, size_t n, cudaStream_t stream);

}  // namespace nccl
}  // namespace weft

#endif  // WEFT_COMM_NCCL_WIDEN_H_
