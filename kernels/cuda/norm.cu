// Multi-tensor L2 norm with kernels/types.h's fixed blocking, so its bits are
// the reference's and the same on every run and device. No floating-point
// atomics; three passes:
//
//   pass 1  one unit per norm block (kNormBlock elements of one tensor):
//           thread l is lane l, summing double(x)^2 over elements l, l + 256,
//           ... in order; the lanes are combined by the fixed tree of
//           BlockSum. partial[unit] is written, never accumulated.
//   pass 2  one thread per tensor adds that tensor's partials in block order
//           from +0.0: tensor_sq[i], and norms[i] = float(sqrt(tensor_sq[i])).
//   pass 3  one thread adds tensor_sq in tensor order: total.
// Which unit a block runs depends on the grid; what a unit computes does not.
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/segment.cuh"
#include "kernels/types.h"

namespace weft {
namespace kernels {
namespace cuda {
namespace {

static_assert(kNormLanes == kThreads && kNormBlock == kChunk, "pass 1 maps lanes to threads and blocks to units");

constexpr int kLoadsInFlight = 8;

template <class T>
__global__ void __launch_bounds__(kThreads) NormPartialKernel(const __grid_constant__ Batch batch, double* partial) {
  using R = typename T::Raw;
  __shared__ double red[kThreads];
  for (uint32_t u = blockIdx.x; u < batch.units; u += gridDim.x) {
    const int s = FindRun(batch, u);
    const Run& run = batch.seg[s];
    const uint64_t begin = static_cast<uint64_t>(u - batch.unit_start[s]) * kChunk;
    const uint64_t left = run.n - begin;
    const uint32_t n = static_cast<uint32_t>(left < kChunk ? left : kChunk);
    const R* src = static_cast<const R*>(run.src) + begin;
    double lane = 0.0;
    // Loads of a round are all issued before the first add; adds stay in element order.
    for (uint32_t i0 = threadIdx.x; i0 < n; i0 += kThreads * kLoadsInFlight) {
      R x[kLoadsInFlight];
#pragma unroll
      for (int r = 0; r < kLoadsInFlight; ++r) {
        const uint32_t i = i0 + r * kThreads;
        x[r] = i < n ? src[i] : R(0);
      }
#pragma unroll
      for (int r = 0; r < kLoadsInFlight; ++r) {
        if (i0 + r * kThreads < n) {
          const double d = Widen<double>(T{}, x[r]);
          lane = __dadd_rn(lane, __dmul_rn(d, d));  // d * d is exact: no FMA question
        }
      }
    }
    const double sum = BlockSum(lane, red);
    if (threadIdx.x == 0) partial[batch.unit_base + u] = sum;
  }
}

// Thread s: tensor batch.tag[s], its partials in block order.
__global__ void __launch_bounds__(kThreads) NormTensorKernel(const __grid_constant__ Batch batch,
                                                             const double* partial, double* tensor_sq,
                                                             float* norms) {
  const uint32_t s = blockIdx.x * kThreads + threadIdx.x;
  if (s >= batch.count) return;
  const uint64_t b = batch.unit_base + batch.unit_start[s];
  const uint64_t e = batch.unit_base + batch.unit_start[s + 1];
  double sum = 0.0;
  for (uint64_t i = b; i < e; ++i) sum = __dadd_rn(sum, partial[i]);
  tensor_sq[batch.tag[s]] = sum;
  if (norms != nullptr) norms[batch.tag[s]] = __double2float_rn(sqrt(sum));
}

__global__ void NormTotalKernel(const double* tensor_sq, size_t n, float* total) {
  double all = 0.0;
  for (size_t i = 0; i < n; ++i) all = __dadd_rn(all, tensor_sq[i]);
  *total = __double2float_rn(sqrt(all));
}

template <class T>
cudaError_t LaunchNormBatch(const Batch& b, double* partial, double* tensor_sq, float* norms, cudaStream_t stream) {
  static std::atomic<int> per_sm{0};
  if (b.units > 0) {
    int grid = 0;
    const cudaError_t e = GridSize(reinterpret_cast<const void*>(&NormPartialKernel<T>), per_sm, b.units, &grid);
    if (e != cudaSuccess) return e;
    NormPartialKernel<T><<<grid, kThreads, 0, stream>>>(b, partial);
    const cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess) return le;
  }
  NormTensorKernel<<<(b.count + kThreads - 1) / kThreads, kThreads, 0, stream>>>(b, partial, tensor_sq, norms);
  return cudaGetLastError();
}

cudaError_t EnqueueNorm(const TensorRef* tensors, size_t n, float* norms, float* total, double* partial,
                        double* tensor_sq, cudaStream_t stream) {
  BatchBuilder bb(/*keep_empty=*/true);  // an empty tensor still gets its norm, 0
  for (DataType t : kFloatTypes) {
    if (t == DataType::kFloat64) continue;  // not a norm type (kernels/kernels.h)
    const cudaError_t e = WithType(t, [&](auto tag) {
      using T = decltype(tag);
      auto flush = [&](const Batch& b) { return LaunchNormBatch<T>(b, partial, tensor_sq, norms, stream); };
      for (size_t i = 0; i < n; ++i) {
        if (tensors[i].dtype != t) continue;
        const cudaError_t ei = bb.Add({tensors[i].data, nullptr, tensors[i].count, 0}, i, flush);
        if (ei != cudaSuccess) return ei;
      }
      return bb.Finish(flush);
    });
    if (e != cudaSuccess) return e;
  }
  if (total == nullptr) return cudaSuccess;
  NormTotalKernel<<<1, 1, 0, stream>>>(tensor_sq, n, total);
  return cudaGetLastError();
}

}  // namespace

int L2Norm(const TensorRef* tensors, size_t n, float* norms, float* total, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  uint64_t units = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!IsFloatType(tensors[i].dtype) || tensors[i].dtype == DataType::kFloat64) return cudaErrorInvalidValue;
    units += Units(tensors[i].count);
  }
  // Scratch, stream-ordered: graph capture records it as allocation nodes.
  double* scratch = nullptr;
  const size_t bytes = (units + n) * sizeof(double);
  if (bytes > 0) {
    const cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&scratch), bytes, st);
    if (e != cudaSuccess) return e;
  }
  const cudaError_t e = EnqueueNorm(tensors, n, norms, total, scratch, scratch + units, st);
  if (scratch != nullptr) {
    const cudaError_t fe = cudaFreeAsync(scratch, st);
    if (e == cudaSuccess) return fe;
  }
  return e;
}

}  // namespace cuda
}  // namespace kernels
}  // namespace weft
