// The machinery every CUDA multi-tensor kernel here shares (nvcc only).
//
// A call's work is a list of *segments*: a source range, a destination range
// and an element count, plus a number of destination elements after them to
// zero (chunk_cat's padding). Flatten, unflatten, unscale, chunk_cat and its
// inverse differ only in how they cut tensors into segments; the L2 norm
// reads segments without writing.
//
// Segments travel in a Batch passed by value as the kernel's parameter (up to
// kMaxSegs per launch, about 20 KB: sm_70+ takes 32 KB of parameters since
// CUDA 12.1), so a launch reads no host-written device memory and a CUDA
// graph captures it whole. Each segment is cut into *units* of kChunk
// elements; unit_start[s] is the first unit of segment s. A persistent grid
// (the SM count times the occupancy, never more than the units) walks the
// units: block b takes units b, b + gridDim.x, ...; a unit finds its segment
// by binary search over unit_start. Inside a unit, elements run in three
// phases: a scalar head until both source and destination are 16-byte
// aligned, a 16-byte vector body (kUnroll vectors in flight per thread), and
// a scalar tail. Where source and destination can never be aligned together
// the whole unit runs scalar, still coalesced.
#ifndef WEFT_KERNELS_CUDA_SEGMENT_CUH_
#define WEFT_KERNELS_CUDA_SEGMENT_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace weft {
namespace kernels {
namespace cuda {

inline constexpr int kThreads = 256;
inline constexpr int kUnroll = 4;
inline constexpr uint32_t kChunk = 16384;  // elements per unit
inline constexpr int kMaxSegs = 512;

struct Segment {
  const void* src;
  void* dst;
  uint64_t n;      // elements converted from src to dst
  uint64_t zeros;  // destination elements after them set to zero
};

struct Batch {
  uint32_t count;                     // segments
  uint32_t units;                     // units over all segments
  uint64_t unit_base;                 // units of earlier batches of the same call (norm scratch index)
  uint32_t unit_start[kMaxSegs + 1];  // unit_start[count] == units
  uint32_t tag[kMaxSegs];             // the caller's tensor index
  Segment seg[kMaxSegs];
};
// The kernel parameter limit on sm_70+ with CUDA >= 12.1, less room for the other arguments.
static_assert(sizeof(Batch) + 64 <= 32764, "Batch no longer fits in the kernel parameters");

// ---------------------------------------------------------------- element types
struct F32 { using Raw = float; };
struct F16 { using Raw = unsigned short; };
struct BF16 { using Raw = unsigned short; };
struct F64 { using Raw = double; };

// The arithmetic type: double when either side is float64.
template <class S, class D>
using ComputeT = std::conditional_t<std::is_same_v<S, F64> || std::is_same_v<D, F64>, double, float>;

// Elements per 16-byte access of the narrower side.
template <class S, class D>
inline constexpr int kVec = 16 / (sizeof(typename S::Raw) < sizeof(typename D::Raw) ? sizeof(typename S::Raw)
                                                                                    : sizeof(typename D::Raw));

template <class T, int V>
struct alignas(16) Pack {
  typename T::Raw v[V];
};

// Exact widening to the arithmetic type.
template <class C> __device__ __forceinline__ C Widen(F32, float x) { return static_cast<C>(x); }
template <class C> __device__ __forceinline__ C Widen(F16, unsigned short x) {
  return static_cast<C>(__half2float(__ushort_as_half(x)));
}
template <class C> __device__ __forceinline__ C Widen(BF16, unsigned short x) {
  return static_cast<C>(__bfloat162float(__ushort_as_bfloat16(x)));
}
template <class C> __device__ __forceinline__ C Widen(F64, double x) { return static_cast<C>(x); }

// One rounding, to nearest even, from the arithmetic type (double goes
// straight to the half types, never through float).
__device__ __forceinline__ float Narrow(F32, float v) { return v; }
__device__ __forceinline__ float Narrow(F32, double v) { return __double2float_rn(v); }
__device__ __forceinline__ unsigned short Narrow(F16, float v) { return __half_as_ushort(__float2half_rn(v)); }
__device__ __forceinline__ unsigned short Narrow(F16, double v) { return __half_as_ushort(__double2half(v)); }
__device__ __forceinline__ unsigned short Narrow(BF16, float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
__device__ __forceinline__ unsigned short Narrow(BF16, double v) {
  return __bfloat16_as_ushort(__double2bfloat16(v));
}
__device__ __forceinline__ double Narrow(F64, double v) { return v; }

// _rn intrinsics are never contracted into a fused multiply-add, which would
// round once where the host rounds twice.
__device__ __forceinline__ float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double Mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }

__device__ __forceinline__ bool IsFinite(F32, float x) { return isfinite(x); }
__device__ __forceinline__ bool IsFinite(F16, unsigned short x) { return (x & 0x7c00u) != 0x7c00u; }
__device__ __forceinline__ bool IsFinite(BF16, unsigned short x) { return (x & 0x7f80u) != 0x7f80u; }
__device__ __forceinline__ bool IsFinite(F64, double x) { return isfinite(x); }

// ---------------------------------------------------------------- device helpers
__device__ __forceinline__ bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The segment holding unit u: the last s with unit_start[s] <= u (empty
// segments share their successor's start and are skipped over).
__device__ __forceinline__ int FindSegment(const Batch& b, uint32_t u) {
  int lo = 0, hi = static_cast<int>(b.count) - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (b.unit_start[mid] <= u) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// First index j < V (and < n) where both src + j and dst + j are 16-byte aligned; n if none.
template <int V, class A, class B>
__device__ __forceinline__ uint32_t AlignedStart(const A* src, const B* dst, uint32_t n) {
  for (uint32_t j = 0; j < static_cast<uint32_t>(V) && j < n; ++j) {
    if (Aligned16(src + j) && Aligned16(dst + j)) return j;
  }
  return n;
}

// Sum over the block in a fixed tree: the same bits for the same inputs.
__device__ __forceinline__ double BlockSum(double x, double* red) {
  red[threadIdx.x] = x;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const double r = red[0];
  __syncthreads();  // red is reused by the next unit
  return r;
}

// ---------------------------------------------------------------- host side
// Calls f(F32{}), f(F16{}), ... for the float types; cudaErrorInvalidValue otherwise.
template <class F>
cudaError_t WithType(DataType t, F&& f) {
  switch (t) {
    case DataType::kFloat32: return f(F32{});
    case DataType::kFloat16: return f(F16{});
    case DataType::kBfloat16: return f(BF16{});
    case DataType::kFloat64: return f(F64{});
    default: return cudaErrorInvalidValue;
  }
}

inline constexpr DataType kFloatTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16,
                                           DataType::kFloat64};

inline bool IsFloatType(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBfloat16 || t == DataType::kFloat64;
}

inline size_t Size(DataType t) {
  return t == DataType::kFloat64 ? 8 : t == DataType::kFloat32 ? 4 : 2;
}

inline uint64_t Units(uint64_t elems) { return (elems + kChunk - 1) / kChunk; }

// Blocks per SM for `kernel` at kThreads, asked once per kernel (`cache` is its static).
inline cudaError_t GridSize(const void* kernel, std::atomic<int>& cache, uint32_t units, int* grid) {
  int per_sm = cache.load(std::memory_order_relaxed);
  if (per_sm == 0) {
    const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
    if (e != cudaSuccess) return e;
    if (per_sm < 1) per_sm = 1;
    cache.store(per_sm, std::memory_order_relaxed);
  }
  int dev = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return e;
  const uint64_t full = static_cast<uint64_t>(sms) * static_cast<uint64_t>(per_sm);
  *grid = static_cast<int>(units < full ? units : full);
  return cudaSuccess;
}

// Packs segments into batches and hands each full batch to a launcher.
// unit_base keeps counting across Finish() calls, so one builder can serve
// several launches (one per dtype group) of one call.
class BatchBuilder {
 public:
  // keep_empty: give empty segments a slot too (the norm writes a result for each tensor).
  explicit BatchBuilder(bool keep_empty) : keep_empty_(keep_empty) { Reset(); }

  template <class Flush>
  cudaError_t Add(const Segment& s, uint32_t tag, Flush&& flush) {
    const uint64_t units = Units(s.n + s.zeros);
    if (units == 0 && !keep_empty_) return cudaSuccess;
    if (units > UINT32_MAX) return cudaErrorInvalidValue;  // 2^46 elements in one tensor
    if (b_.count == kMaxSegs || b_.units + units > UINT32_MAX) {
      const cudaError_t e = Finish(flush);
      if (e != cudaSuccess) return e;
    }
    b_.seg[b_.count] = s;
    b_.tag[b_.count] = tag;
    b_.unit_start[b_.count] = b_.units;
    b_.units += static_cast<uint32_t>(units);
    ++b_.count;
    b_.unit_start[b_.count] = b_.units;
    return cudaSuccess;
  }

  template <class Flush>
  cudaError_t Finish(Flush&& flush) {
    if (b_.count == 0) return cudaSuccess;
    const cudaError_t e = flush(static_cast<const Batch&>(b_));
    const uint64_t next = b_.unit_base + b_.units;
    Reset();
    b_.unit_base = next;
    return e;
  }

 private:
  void Reset() {
    b_.count = 0;
    b_.units = 0;
    b_.unit_start[0] = 0;
  }

  const bool keep_empty_;
  Batch b_{};
};

}  // namespace cuda
}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_CUDA_SEGMENT_CUH_
