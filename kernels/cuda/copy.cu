// The copy engine behind flatten, unflatten, chunk_cat and chunk_split (their
// layouts reach here as kernels/types.h segments, planned by kernels/plan.cc)
// and AMP unscale: one converting copy kernel over segments (segment.cuh),
// instantiated per (source, destination) float type pair and Mode.
#include <cstdint>
#include <cstdio>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/segment.cuh"

namespace weft {
namespace kernels {
namespace cuda {
namespace {

struct CopyArgs {
  float scale;
  int* found_inf;  // Mode::kUnscale only
};

// Elements [0, n) of one unit: scalar head, 16-byte vector body, scalar tail.
template <class S, class D, Mode kMode>
__device__ __forceinline__ void CopyRange(const typename S::Raw* src, typename D::Raw* dst, uint32_t n, float scale,
                                          bool& bad) {
  constexpr int V = kVec<S, D>;
  using PS = Pack<S, V>;
  using PD = Pack<D, V>;
  const uint32_t head = AlignedStart<V>(src, dst, n);
  const uint32_t nvec = (n - head) / V;
  const uint32_t tail = head + nvec * V;

  // head
  for (uint32_t i = threadIdx.x; i < head; i += kThreads) dst[i] = Apply<S, D, kMode>(src[i], dst[i], scale, bad);
  // body: every load of a round is issued before the first store
  const PS* vs = reinterpret_cast<const PS*>(src + head);
  PD* vd = reinterpret_cast<PD*>(dst + head);
  for (uint32_t v0 = threadIdx.x; v0 < nvec; v0 += kThreads * kUnroll) {
    PS in[kUnroll];
    PD out[kUnroll];
#pragma unroll
    for (int r = 0; r < kUnroll; ++r) {
      const uint32_t v = v0 + r * kThreads;
      if (v < nvec) {
        in[r] = vs[v];
        if constexpr (kMode == Mode::kAccumulate) out[r] = vd[v];
      }
    }
#pragma unroll
    for (int r = 0; r < kUnroll; ++r) {
      const uint32_t v = v0 + r * kThreads;
      if (v < nvec) {
#pragma unroll
        for (int k = 0; k < V; ++k) out[r].v[k] = Apply<S, D, kMode>(in[r].v[k], out[r].v[k], scale, bad);
        vd[v] = out[r];
      }
    }
  }
  // tail
  for (uint32_t i = tail + threadIdx.x; i < n; i += kThreads) dst[i] = Apply<S, D, kMode>(src[i], dst[i], scale, bad);
}

template <class S, class D, Mode kMode>
__global__ void __launch_bounds__(kThreads) CopyKernel(const __grid_constant__ Batch batch, const CopyArgs args) {
  using SR = typename S::Raw;
  using DR = typename D::Raw;
  bool bad = false;
  for (uint32_t u = blockIdx.x; u < batch.units; u += gridDim.x) {
    const int s = FindRun(batch, u);
    const Run& seg = batch.seg[s];
    const uint64_t begin = static_cast<uint64_t>(u - batch.unit_start[s]) * kChunk;
    const uint64_t left = seg.n + seg.zeros - begin;
    const uint32_t len = static_cast<uint32_t>(left < kChunk ? left : kChunk);
    const uint32_t ncopy = begin >= seg.n ? 0u : static_cast<uint32_t>(seg.n - begin < len ? seg.n - begin : len);
    DR* dst = static_cast<DR*>(seg.dst) + begin;
    if (ncopy > 0) CopyRange<S, D, kMode>(static_cast<const SR*>(seg.src) + begin, dst, ncopy, args.scale, bad);
    // chunk_cat's zero padding
    for (uint32_t i = ncopy + threadIdx.x; i < len; i += kThreads) dst[i] = DR(0);
  }
  if constexpr (kMode == Mode::kUnscale) {
    if (bad) atomicExch(args.found_inf, 1);
  }
}

template <class S, class D, Mode kMode>
cudaError_t Launch(const Batch& b, const CopyArgs& args, cudaStream_t stream) {
  static std::atomic<int> per_sm{0};
  auto* kernel = &CopyKernel<S, D, kMode>;
  int grid = 0;
  const cudaError_t e = GridSize(reinterpret_cast<const void*>(kernel), per_sm, b.units, &grid);
  if (e != cudaSuccess) return e;
  kernel<<<grid, kThreads, 0, stream>>>(b, args);
  return cudaGetLastError();
}

// The kernel for one type pair: a bit copy where the reference moves bits.
template <class S, class D>
cudaError_t LaunchPair(const Batch& b, const CopyArgs& args, bool accumulate, cudaStream_t stream) {
  if (accumulate) return Launch<S, D, Mode::kAccumulate>(b, args, stream);
  if constexpr (std::is_same_v<S, D>) {
    if (args.scale == 1.0f) return Launch<S, D, Mode::kBitCopy>(b, args, stream);
  }
  return Launch<S, D, Mode::kConvert>(b, args, stream);
}

}  // namespace

const char* ErrorString(int code) {
  // Both names are static strings; they are joined in a buffer of the calling thread.
  static thread_local char buf[256];
  const auto e = static_cast<cudaError_t>(code);
  std::snprintf(buf, sizeof(buf), "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
  return buf;
}

int CopySegments(const kernels::Segment* segments, size_t n, float scale, bool accumulate, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const CopyArgs args{scale, nullptr};
  for (size_t k = 0; k < n; ++k) {
    if (!IsFloatType(segments[k].dst_t) || (segments[k].src != nullptr && !IsFloatType(segments[k].src_t))) {
      return cudaErrorInvalidValue;
    }
  }
  static_assert(static_cast<int>(DataType::kFloat32) == 0 && static_cast<int>(DataType::kFloat16) == 1 &&
                    static_cast<int>(DataType::kBfloat16) == 2 && static_cast<int>(DataType::kFloat64) == 3,
                "pair indices assume the float types are 0..3");
  // A batch holds one type pair: find the pairs present, then one pass over
  // the segments per pair. Zero fills (src == nullptr) go with the pair
  // (destination, destination), whose kernel writes the zeros.
  auto index = [](DataType t) { return static_cast<int>(t); };  // 0..3 for the float types
  auto pair_of = [&](const kernels::Segment& g) {
    return index(g.dst_t) * 4 + index(g.src != nullptr ? g.src_t : g.dst_t);
  };
  unsigned present = 0;
  for (size_t k = 0; k < n; ++k) present |= 1u << pair_of(segments[k]);
  BatchBuilder bb(/*keep_empty=*/false);
  for (DataType dt : kFloatTypes) {
    for (DataType st_t : kFloatTypes) {
      const int pair = index(dt) * 4 + index(st_t);
      if ((present & (1u << pair)) == 0) continue;
      const cudaError_t e = WithType(st_t, [&](auto s) {
        return WithType(dt, [&](auto d) {
          auto flush = [&](const Batch& b) { return LaunchPair<decltype(s), decltype(d)>(b, args, accumulate, st); };
          for (size_t k = 0; k < n; ++k) {
            const kernels::Segment& g = segments[k];
            if (pair_of(g) != pair) continue;
            const Run run = g.src != nullptr ? Run{g.src, g.dst, g.count, 0} : Run{nullptr, g.dst, 0, g.count};
            const cudaError_t ek = bb.Add(run, static_cast<uint32_t>(k), flush);
            if (ek != cudaSuccess) return ek;
          }
          return bb.Finish(flush);
        });
      });
      if (e != cudaSuccess) return e;
    }
  }
  return cudaSuccess;
}

int Unscale(const TensorRef* tensors, size_t n, float inv_scale, int* found_inf, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const CopyArgs args{inv_scale, found_inf};
  for (size_t i = 0; i < n; ++i) {
    if (!IsFloatType(tensors[i].dtype) || tensors[i].dtype == DataType::kFloat64) return cudaErrorInvalidValue;
  }
  BatchBuilder bb(/*keep_empty=*/false);
  for (DataType t : kFloatTypes) {
    if (t == DataType::kFloat64) continue;  // the reference unscales in float32 only
    const cudaError_t e = WithType(t, [&](auto tag) {
      using T = decltype(tag);
      auto flush = [&](const Batch& b) { return Launch<T, T, Mode::kUnscale>(b, args, st); };
      for (size_t i = 0; i < n; ++i) {
        if (tensors[i].dtype != t) continue;
        const cudaError_t ei = bb.Add({tensors[i].data, tensors[i].data, tensors[i].count, 0}, i, flush);
        if (ei != cudaSuccess) return ei;
      }
      return bb.Finish(flush);
    });
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace kernels
}  // namespace weft
