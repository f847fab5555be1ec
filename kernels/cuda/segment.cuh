// The machinery every CUDA multi-tensor kernel here shares (nvcc only).
//
// A call's work is a list of *runs* (kernels/types.h's segments, or whole
// tensors): a source range, a destination range and an element count, plus a
// number of destination elements after them to zero (chunk_cat's padding).
// Flatten, unflatten, unscale, chunk_cat and its inverse differ only in how
// they are cut into runs; the L2 norm reads runs without writing.
//
// Runs travel in a Batch passed by value as the kernel's parameter (up to
// kMaxSegs per launch, about 20 KB: sm_70+ takes 32 KB of parameters since
// CUDA 12.1), so a launch reads no host-written device memory and a CUDA
// graph captures it whole. Each run is cut into *units* of kChunk
// elements; unit_start[s] is the first unit of run s. A persistent grid
// (the SM count times the occupancy, never more than the units) walks the
// units: block b takes units b, b + gridDim.x, ...; a unit finds its run
// by binary search over unit_start. Inside a unit, elements run in three
// phases: a scalar head until both source and destination are 16-byte
// aligned, a 16-byte vector body (kUnroll vectors in flight per thread), and
// a scalar tail. Where source and destination can never be aligned together
// the whole unit runs scalar, still coalesced. A CopyPlan keeps its runs in a
// Table in device memory instead, where a unit's run is looked up, not searched.
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

struct Run {
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
  Run seg[kMaxSegs];
};
// The kernel parameter limit on sm_70+ with CUDA >= 12.1, less room for the other arguments.
static_assert(sizeof(Batch) + 64 <= 32764, "Batch no longer fits in the kernel parameters");

// Runs kept in device memory instead of the parameters: a CopyPlan's launch
// table (copy.cu), built and uploaded once, with no limit on its length. Its
// run_of_unit spares the binary search over unit_start (14 dependent loads
// for 10,000 runs) at 4 bytes per unit of kChunk elements.
struct Table {
  const Run* seg;
  const uint32_t* unit_start;   // count + 1 entries; unit_start[count] == units
  const uint32_t* run_of_unit;  // units entries: the run holding each unit
  uint32_t count;
  uint32_t units;
};

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

// ---------------------------------------------------------------- NaN bits
// The GPU's arithmetic and conversions turn every NaN into one canonical NaN;
// the host reference (x86 SSE/AVX, core/dtype.h) keeps the sign and payload,
// quiets it, and makes a negative "default NaN" from invalid operations
// (inf * 0, inf - inf). To give the reference's bits, a NaN result is
// followed as bits of the arithmetic type (uint32 for float, uint64 for
// double) through these steps instead of through the float units.
__device__ __forceinline__ uint32_t NanBits32(F32, float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t NanBits32(F16, unsigned short h) {  // HalfToFloat: not quieted
  return (static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7f800000u | (static_cast<uint32_t>(h & 0x3ffu) << 13);
}
__device__ __forceinline__ uint32_t NanBits32(BF16, unsigned short h) { return static_cast<uint32_t>(h) << 16; }
// cvtss2sd: sign and payload kept, quieted.
__device__ __forceinline__ uint64_t FloatNanToDouble(uint32_t u) {
  return (static_cast<uint64_t>(u & 0x80000000u) << 32) | 0x7ff8000000000000ull |
         (static_cast<uint64_t>(u & 0x7fffffu) << 29);
}
template <class T> __device__ __forceinline__ uint64_t NanBits64(T t, typename T::Raw x) {
  return FloatNanToDouble(NanBits32(t, x));
}
__device__ __forceinline__ uint64_t NanBits64(F64, double x) { return static_cast<uint64_t>(__double_as_longlong(x)); }

template <class C> struct NanOps;
template <> struct NanOps<float> {
  using Bits = uint32_t;
  static constexpr Bits kQuiet = 0x00400000u;
  static constexpr Bits kDefault = 0xffc00000u;  // x86's result of an invalid operation
  template <class T> __device__ static Bits Of(T t, typename T::Raw x) { return NanBits32(t, x); }
  __device__ static Bits OfScale(float s) { return __float_as_uint(s); }
};
template <> struct NanOps<double> {
  using Bits = uint64_t;
  static constexpr Bits kQuiet = 0x0008000000000000ull;
  static constexpr Bits kDefault = 0xfff8000000000000ull;
  template <class T> __device__ static Bits Of(T t, typename T::Raw x) { return NanBits64(t, x); }
  __device__ static Bits OfScale(float s) { return FloatNanToDouble(__float_as_uint(s)); }
};

// A quiet NaN of the arithmetic type, rounded to the destination as core/dtype.h does.
__device__ __forceinline__ float NarrowNan(F32, uint32_t u) { return __uint_as_float(u); }
__device__ __forceinline__ unsigned short NarrowNan(F16, uint32_t u) {  // FloatToHalf
  return static_cast<unsigned short>(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
}
__device__ __forceinline__ unsigned short NarrowNan(BF16, uint32_t u) {  // FloatToBf16
  return static_cast<unsigned short>((u >> 16) | 0x0040u);
}
__device__ __forceinline__ double NarrowNan(F64, uint64_t q) { return __longlong_as_double(static_cast<long long>(q)); }
__device__ __forceinline__ float NarrowNan(F32, uint64_t q) {  // cvtsd2ss: top payload bits kept
  return __uint_as_float(static_cast<uint32_t>((q >> 32) & 0x80000000u) | 0x7fc00000u |
                         static_cast<uint32_t>((q >> 29) & 0x7fffffu));
}
__device__ __forceinline__ unsigned short NarrowNan(F16, uint64_t q) {  // DoubleToHalf
  return static_cast<unsigned short>(((q >> 48) & 0x8000u) | 0x7e00u);
}
__device__ __forceinline__ unsigned short NarrowNan(BF16, uint64_t q) {  // DoubleToBf16
  return static_cast<unsigned short>(((q >> 48) & 0x8000u) | 0x7fc0u);
}

// What one element of a kernel does.
enum class Mode : int {
  kBitCopy,     // same type, scale 1, no accumulation: the bits move unchanged
  kConvert,     // round(scale * x)
  kAccumulate,  // round(old + scale * x)
  kUnscale,     // round(scale * x), and flag a non-finite result
};

// One element, with the reference's arithmetic (kernels/reference/convert.h)
// and its NaN bits. The product and the sum are _rn intrinsics: never
// contracted into a fused multiply-add, which would round once where the host
// rounds twice. When both the old value and the product are NaN the old one
// wins (the reference's operand order).
template <class S, class D, Mode kMode, class C = ComputeT<S, D>>
__device__ __forceinline__ typename D::Raw Apply(typename S::Raw x, const typename D::Raw& old, float scale,
                                                 bool& bad) {
  if constexpr (kMode == Mode::kBitCopy) {
    static_assert(std::is_same_v<S, D>, "a bit copy needs one type");
    return x;
  } else {
    using N = NanOps<C>;
    typename N::Bits nan = 0;  // non-zero: the result is this NaN
    C v = Widen<C>(S{}, x);
    if (isnan(v)) {
      nan = N::Of(S{}, x) | N::kQuiet;
    } else {
      v = Mul(v, static_cast<C>(scale));  // exact widening of a float
      if (isnan(v)) nan = isnan(scale) ? (N::OfScale(scale) | N::kQuiet) : N::kDefault;
    }
    if constexpr (kMode == Mode::kAccumulate) {
      const C o = Widen<C>(D{}, old);
      if (isnan(o)) {
        nan = N::Of(D{}, old) | N::kQuiet;
      } else if (nan == 0) {
        v = Add(o, v);
        if (isnan(v)) nan = N::kDefault;
      }
    }
    const typename D::Raw r = nan != 0 ? NarrowNan(D{}, nan) : Narrow(D{}, v);
    if constexpr (kMode == Mode::kUnscale) bad |= !IsFinite(D{}, r);
    return r;
  }
}

// ---------------------------------------------------------------- device helpers
__device__ __forceinline__ bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The run holding unit u: the last s with unit_start[s] <= u (empty
// segments share their successor's start and are skipped over).
__device__ __forceinline__ int FindRun(const Batch& b, uint32_t u) {
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
  cudaError_t Add(const Run& s, uint32_t tag, Flush&& flush) {
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
