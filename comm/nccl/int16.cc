// int16 reductions on NCCL, which has no int16 type.
//
// The input is widened to int32 in a stream-ordered temporary, NCCL reduces
// that in place, and the result is narrowed into the output, all on the
// caller's stream. The results are the host backends' bit for bit: int32
// sums and products wrap modulo 2^32, so their low 16 bits are those of
// int16's wrapping arithmetic; min and max are exact; and an average (NCCL's
// int32 sum, then divided with truncation toward zero) divides the exact sum
// as long as N int16 values cannot overflow int32, which holds up to 65536
// ranks. It costs a temporary of twice the input and twice the bytes on the
// wire; refusing int16 instead would leave a CUDA tensor without the
// reductions the same tensor has on host memory.
#include <cstdint>

#include "comm/nccl/comm.h"
#include "comm/nccl/widen.h"
#include "core/cuda/runtime.h"
#include "core/status.h"

namespace weft {
namespace nccl {
namespace {

constexpr int kMaxExactAvgRanks = 65536;  // 65536 * 2^15 = 2^31: the int32 sum cannot overflow up to here

}  // namespace

absl::Status NcclComm::ReduceWidened(const char* what, RedOp op, const void* send, size_t in_count, void* recv,
                                     size_t out_offset, size_t out_count, void* stream_ptr,
                                     const std::function<ncclResult_t(int32_t* buf)>& reduce) {
  if (op == RedOp::kAvg && size() > kMaxExactAvgRanks) {
    return Unsupported("%s: avg of int16 on %d ranks: NCCL has no int16, and weft's int32 sum of it is exact up to "
                       "%d ranks only; reduce with sum and divide, or use int32", what, size(), kMaxExactAvgRanks);
  }
  const auto stream = static_cast<cudaStream_t>(stream_ptr);
  int32_t* buf = nullptr;
  if (in_count > 0) {
    RETURN_IF_ERROR(cuda::Check(cudaMallocAsync(reinterpret_cast<void**>(&buf), in_count * sizeof(int32_t), stream),
                                "%s on rank %d: int16 widened to int32: cudaMallocAsync of %zu bytes", what, rank(),
                                in_count * sizeof(int32_t)));
  }
  absl::Status s = cuda::Check(WidenInt16(send, buf, in_count, stream), "%s: widening int16 to int32", what);
  if (s.ok()) s = Check(reduce(buf), what);
  // After the collective: inside a group, NCCL enqueues it only at the group's end.
  const int device = device_;
  absl::Status after = AfterCollective([=]() -> absl::Status {
    DeviceGuard guard(device);
    RETURN_IF_ERROR(cuda::Check(guard.status(), "%s: cudaSetDevice(%d)", what, device));
    absl::Status n = s.ok() ? cuda::Check(NarrowToInt16(buf + out_offset, recv, out_count, stream),
                                          "%s: narrowing the int32 result to int16", what)
                            : absl::OkStatus();
    if (buf != nullptr) n.Update(cuda::Check(cudaFreeAsync(buf, stream), "%s: cudaFreeAsync", what));
    return n;
  });
  s.Update(after);
  return s;
}

}  // namespace nccl
}  // namespace weft
