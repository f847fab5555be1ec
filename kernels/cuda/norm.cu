// Multi-tensor L2 norm, deterministic: a fixed-order two-pass reduction with
// no floating-point atomics.
//
//   pass 1  each unit (kChunk elements of one tensor) sums its squares in
//           double: thread t takes a fixed stride of elements, then a fixed
//           block tree. partial[unit] is written, never accumulated.
//   pass 2  one block per tensor sums that tensor's partials in unit order
//           (block tree again): tensor_sq[i], norms[i] = sqrt.
//   pass 3  one block sums tensor_sq in tensor order: total.
// Which unit a block runs changes with the grid, but what a unit computes
// does not, so the bits depend only on the tensor sizes and values.
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/segment.cuh"

namespace weft {
namespace kernels {
namespace cuda {
namespace {

template <class T>
__device__ __forceinline__ double Square(typename T::Raw x) {
  const double d = Widen<double>(T{}, x);
  return d * d;  // exact for float, float16 and bfloat16 inputs
}

template <class T>
__global__ void __launch_bounds__(kThreads) NormPartialKernel(const __grid_constant__ Batch batch, double* partial) {
  using R = typename T::Raw;
  constexpr int V = 16 / sizeof(R);
  using P = Pack<T, V>;
  __shared__ double red[kThreads];
  for (uint32_t u = blockIdx.x; u < batch.units; u += gridDim.x) {
    const int s = FindSegment(batch, u);
    const Segment& seg = batch.seg[s];
    const uint64_t begin = static_cast<uint64_t>(u - batch.unit_start[s]) * kChunk;
    const uint64_t left = seg.n - begin;
    const uint32_t n = static_cast<uint32_t>(left < kChunk ? left : kChunk);
    const R* src = static_cast<const R*>(seg.src) + begin;
    const uint32_t head = AlignedStart<V>(src, src, n);
    const uint32_t nvec = (n - head) / V;
    const uint32_t tail = head + nvec * V;
    double acc = 0.0;
    for (uint32_t i = threadIdx.x; i < head; i += kThreads) acc += Square<T>(src[i]);
    const P* vs = reinterpret_cast<const P*>(src + head);
    for (uint32_t v0 = threadIdx.x; v0 < nvec; v0 += kThreads * kUnroll) {
      P in[kUnroll];
#pragma unroll
      for (int r = 0; r < kUnroll; ++r) {
        if (v0 + r * kThreads < nvec) in[r] = vs[v0 + r * kThreads];
      }
#pragma unroll
      for (int r = 0; r < kUnroll; ++r) {
        if (v0 + r * kThreads < nvec) {
#pragma unroll
          for (int k = 0; k < V; ++k) acc += Square<T>(in[r].v[k]);
        }
      }
    }
    for (uint32_t i = tail + threadIdx.x; i < n; i += kThreads) acc += Square<T>(src[i]);
    const double sum = BlockSum(acc, red);
    if (threadIdx.x == 0) partial[batch.unit_base + u] = sum;
  }
}

// Block s: tensor batch.tag[s], from its partials in unit order.
__global__ void __launch_bounds__(kThreads) NormTensorKernel(const __grid_constant__ Batch batch,
                                                             const double* partial, double* tensor_sq,
                                                             float* norms) {
  __shared__ double red[kThreads];
  const uint32_t s = blockIdx.x;
  const uint64_t b = batch.unit_base + batch.unit_start[s];
  const uint64_t e = batch.unit_base + batch.unit_start[s + 1];
  double acc = 0.0;
  for (uint64_t i = b + threadIdx.x; i < e; i += kThreads) acc += partial[i];
  const double sum = BlockSum(acc, red);
  if (threadIdx.x == 0) {
    tensor_sq[batch.tag[s]] = sum;
    if (norms != nullptr) norms[batch.tag[s]] = __double2float_rn(sqrt(sum));
  }
}

__global__ void __launch_bounds__(kThreads) NormTotalKernel(const double* tensor_sq, int n, float* total) {
  __shared__ double red[kThreads];
  double acc = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) acc += tensor_sq[i];
  const double sum = BlockSum(acc, red);
  if (threadIdx.x == 0) *total = __double2float_rn(sqrt(sum));
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
  NormTensorKernel<<<b.count, kThreads, 0, stream>>>(b, partial, tensor_sq, norms);
  return cudaGetLastError();
}

cudaError_t EnqueueNorm(const Tensor* tensors, int n, float* norms, float* total, double* partial,
                        double* tensor_sq, cudaStream_t stream) {
  BatchBuilder bb(/*keep_empty=*/true);
  for (DataType t : kFloatTypes) {
    const cudaError_t e = WithType(t, [&](auto tag) {
      using T = decltype(tag);
      auto flush = [&](const Batch& b) { return LaunchNormBatch<T>(b, partial, tensor_sq, norms, stream); };
      for (int i = 0; i < n; ++i) {
        if (tensors[i].dtype != t) continue;
        const cudaError_t ei = bb.Add({tensors[i].data, nullptr, tensors[i].count, 0}, i, flush);
        if (ei != cudaSuccess) return ei;
      }
      return bb.Finish(flush);
    });
    if (e != cudaSuccess) return e;
  }
  if (total == nullptr) return cudaSuccess;
  NormTotalKernel<<<1, kThreads, 0, stream>>>(tensor_sq, n, total);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchL2Norm(const Tensor* tensors, int n, float* norms, float* total, cudaStream_t stream) {
  if (n < 0 || (n > 0 && tensors == nullptr)) return cudaErrorInvalidValue;
  uint64_t units = 0;
  for (int i = 0; i < n; ++i) {
    if (!IsFloatType(tensors[i].dtype)) return cudaErrorInvalidValue;
    units += Units(tensors[i].count);
  }
  // Scratch, stream-ordered so that graph capture records it as allocation nodes.
  double* scratch = nullptr;
  const size_t bytes = (units + static_cast<uint64_t>(n)) * sizeof(double);
  if (bytes > 0) {
    const cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&scratch), bytes, stream);
    if (e != cudaSuccess) return e;
  }
  const cudaError_t e = EnqueueNorm(tensors, n, norms, total, scratch, scratch + units, stream);
  if (scratch != nullptr) {
    const cudaError_t fe = cudaFreeAsync(scratch, stream);
    if (e == cudaSuccess) return fe;
  }
  return e;
}

}  // namespace cuda
}  // namespace kernels
}  // namespace weft
