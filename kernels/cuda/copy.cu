// Flatten, unflatten, AMP unscale and chunk_cat with its inverse: one
// converting copy kernel over segments (segment.cuh), instantiated for every
// (source, destination) float type pair.
#include <cstdint>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/segment.cuh"

namespace weft {
namespace kernels {
namespace cuda {
namespace {

struct CopyArgs {
  float scale;
  int* found_inf;  // kCheck only
};

// out = round_D(scale * x (+ old)), in the pair's arithmetic type.
template <class S, class D, bool kAcc, bool kCheck, class C>
__device__ __forceinline__ typename D::Raw Apply(typename S::Raw x, const typename D::Raw& old, C scale, bool& bad) {
  C v = Mul(Widen<C>(S{}, x), scale);
  if constexpr (kAcc) v = Add(Widen<C>(D{}, old), v);
  const typename D::Raw r = Narrow(D{}, v);
  if constexpr (kCheck) bad |= !IsFinite(D{}, r);
  return r;
}

// Elements [0, n) of one unit: scalar head, 16-byte vector body, scalar tail.
template <class S, class D, bool kAcc, bool kCheck, class C>
__device__ __forceinline__ void CopyRange(const typename S::Raw* src, typename D::Raw* dst, uint32_t n, C scale,
                                          bool& bad) {
  constexpr int V = kVec<S, D>;
  using PS = Pack<S, V>;
  using PD = Pack<D, V>;
  const uint32_t head = AlignedStart<V>(src, dst, n);
  const uint32_t nvec = (n - head) / V;
  const uint32_t tail = head + nvec * V;

  // head
  for (uint32_t i = threadIdx.x; i < head; i += kThreads) {
    dst[i] = Apply<S, D, kAcc, kCheck>(src[i], dst[i], scale, bad);
  }
  // body: every load of a round issued before the first store
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
        if constexpr (kAcc) out[r] = vd[v];
      }
    }
#pragma unroll
    for (int r = 0; r < kUnroll; ++r) {
      const uint32_t v = v0 + r * kThreads;
      if (v < nvec) {
#pragma unroll
        for (int k = 0; k < V; ++k) out[r].v[k] = Apply<S, D, kAcc, kCheck>(in[r].v[k], out[r].v[k], scale, bad);
        vd[v] = out[r];
      }
    }
  }
  // tail
  for (uint32_t i = tail + threadIdx.x; i < n; i += kThreads) {
    dst[i] = Apply<S, D, kAcc, kCheck>(src[i], dst[i], scale, bad);
  }
}

template <class S, class D, bool kAcc, bool kCheck>
__global__ void __launch_bounds__(kThreads) CopyKernel(const __grid_constant__ Batch batch, const CopyArgs args) {
  using SR = typename S::Raw;
  using DR = typename D::Raw;
  using C = ComputeT<S, D>;
  const C scale = static_cast<C>(args.scale);
  bool bad = false;
  for (uint32_t u = blockIdx.x; u < batch.units; u += gridDim.x) {
    const int s = FindSegment(batch, u);
    const Segment& seg = batch.seg[s];
    const uint64_t begin = static_cast<uint64_t>(u - batch.unit_start[s]) * kChunk;
    const uint64_t left = seg.n + seg.zeros - begin;
    const uint32_t len = static_cast<uint32_t>(left < kChunk ? left : kChunk);
    const uint32_t ncopy =
        begin >= seg.n ? 0u : static_cast<uint32_t>(seg.n - begin < len ? seg.n - begin : len);
    DR* dst = static_cast<DR*>(seg.dst) + begin;
    if (ncopy > 0) CopyRange<S, D, kAcc, kCheck>(static_cast<const SR*>(seg.src) + begin, dst, ncopy, scale, bad);
    // chunk_cat's zero padding: short, scalar
    for (uint32_t i = ncopy + threadIdx.x; i < len; i += kThreads) dst[i] = DR(0);
  }
  if constexpr (kCheck) {
    if (bad) atomicExch(args.found_inf, 1);
  }
}

template <class S, class D, bool kAcc, bool kCheck>
cudaError_t LaunchCopy(const Batch& b, const CopyArgs& args, cudaStream_t stream) {
  static std::atomic<int> per_sm{0};
  auto* kernel = &CopyKernel<S, D, kAcc, kCheck>;
  int grid = 0;
  const cudaError_t e = GridSize(reinterpret_cast<const void*>(kernel), per_sm, b.units, &grid);
  if (e != cudaSuccess) return e;
  kernel<<<grid, kThreads, 0, stream>>>(b, args);
  return cudaGetLastError();
}

// Element offsets of packed tensors (offsets == nullptr), else `offsets` itself.
const size_t* PackedOffsets(const Tensor* ts, int n, const size_t* offsets, std::vector<size_t>& storage) {
  if (offsets != nullptr) return offsets;
  storage.resize(n);
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    storage[i] = at;
    at += ts[i].count;
  }
  return storage.data();
}

// chunk_elems[i], defaulted to ceil(count / world).
size_t ChunkOf(const ChunkLayout& l, const Tensor& t, int i) {
  if (l.chunk_elems != nullptr) return l.chunk_elems[i];
  const size_t w = static_cast<size_t>(l.world);
  return (t.count + w - 1) / w;
}

std::vector<size_t> SlabOffsets(const ChunkLayout& l, const Tensor* ts, int n, size_t* slab_elems) {
  std::vector<size_t> off(n);
  size_t at = 0;
  for (int i = 0; i < n; ++i) {
    off[i] = l.slab_offsets != nullptr ? l.slab_offsets[i] : at;
    at += ChunkOf(l, ts[i], i);
  }
  *slab_elems = l.slab_elems != 0 ? l.slab_elems : at;
  return off;
}

cudaError_t CheckTypes(const Tensor* ts, int n) {
  if (n < 0 || (n > 0 && ts == nullptr)) return cudaErrorInvalidValue;
  for (int i = 0; i < n; ++i) {
    if (!IsFloatType(ts[i].dtype)) return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

// A batch holds one type pair, so each float type present among `ts` gets
// its own launches: for each, `segs(i, emit)` emits the segments of tensor i
// and full batches go to LaunchCopy<type of ts, other, ...>. `other` is the
// fixed side's type; kOtherIsDst says which side that is.
template <bool kOtherIsDst, bool kAcc, bool kCheck, class Segs>
cudaError_t CopyByType(const Tensor* ts, int n, DataType other, const CopyArgs& args, cudaStream_t stream,
                       Segs&& segs) {
  BatchBuilder bb(false);
  for (DataType t : kFloatTypes) {
    bool any = false;
    for (int i = 0; i < n && !any; ++i) any = ts[i].dtype == t;
    if (!any) continue;
    const cudaError_t e = WithType(t, [&](auto mine) {
      return WithType(other, [&](auto fixed) {
        using S = std::conditional_t<kOtherIsDst, decltype(mine), decltype(fixed)>;
        using D = std::conditional_t<kOtherIsDst, decltype(fixed), decltype(mine)>;
        auto flush = [&](const Batch& b) { return LaunchCopy<S, D, kAcc, kCheck>(b, args, stream); };
        for (int i = 0; i < n; ++i) {
          if (ts[i].dtype != t) continue;
          const cudaError_t ei =
              segs(i, [&](const Segment& seg) { return bb.Add(seg, static_cast<uint32_t>(i), flush); });
          if (ei != cudaSuccess) return ei;
        }
        return bb.Finish(flush);
      });
    });
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t LaunchFlatten(const Tensor* srcs, int n, void* dst, DataType dst_t, const size_t* offsets, float scale,
                          cudaStream_t stream) {
  cudaError_t e = CheckTypes(srcs, n);
  if (e != cudaSuccess || !IsFloatType(dst_t)) return e != cudaSuccess ? e : cudaErrorInvalidValue;
  std::vector<size_t> storage;
  const size_t* off = PackedOffsets(srcs, n, offsets, storage);
  return CopyByType<true, false, false>(srcs, n, dst_t, {scale, nullptr}, stream, [&](int i, auto&& emit) {
    return emit({srcs[i].data, static_cast<char*>(dst) + off[i] * Size(dst_t), srcs[i].count, 0});
  });
}

cudaError_t LaunchUnflatten(const void* src, DataType src_t, const size_t* offsets, const Tensor* dsts, int n,
                            float scale, bool accumulate, cudaStream_t stream) {
  cudaError_t e = CheckTypes(dsts, n);
  if (e != cudaSuccess || !IsFloatType(src_t)) return e != cudaSuccess ? e : cudaErrorInvalidValue;
  std::vector<size_t> storage;
  const size_t* off = PackedOffsets(dsts, n, offsets, storage);
  auto segs = [&](int i, auto&& emit) {
    return emit({static_cast<const char*>(src) + off[i] * Size(src_t), dsts[i].data, dsts[i].count, 0});
  };
  const CopyArgs args{scale, nullptr};
  return accumulate ? CopyByType<false, true, false>(dsts, n, src_t, args, stream, segs)
                    : CopyByType<false, false, false>(dsts, n, src_t, args, stream, segs);
}

cudaError_t LaunchUnscaleCheckFinite(const Tensor* tensors, int n, float inv_scale, int* found_inf,
                                     cudaStream_t stream) {
  cudaError_t e = CheckTypes(tensors, n);
  if (e != cudaSuccess) return e;
  if (found_inf == nullptr) return cudaErrorInvalidValue;
  BatchBuilder bb(false);
  const CopyArgs args{inv_scale, found_inf};
  for (DataType t : kFloatTypes) {
    e = WithType(t, [&](auto tag) {
      using T = decltype(tag);
      auto flush = [&](const Batch& b) { return LaunchCopy<T, T, false, true>(b, args, stream); };
      for (int i = 0; i < n; ++i) {
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

cudaError_t LaunchChunkCat(const Tensor* srcs, int n, const ChunkLayout& layout, void* dst, DataType dst_t,
                           float scale, cudaStream_t stream) {
  cudaError_t e = CheckTypes(srcs, n);
  if (e != cudaSuccess || !IsFloatType(dst_t) || layout.world < 1) return e != cudaSuccess ? e : cudaErrorInvalidValue;
  size_t slab = 0;
  const std::vector<size_t> off = SlabOffsets(layout, srcs, n, &slab);
  const size_t es = Size(dst_t);
  return CopyByType<true, false, false>(srcs, n, dst_t, {scale, nullptr}, stream, [&](int i, auto&& emit) {
    const size_t c = ChunkOf(layout, srcs[i], i), count = srcs[i].count, ss = Size(srcs[i].dtype);
    for (int r = 0; r < layout.world; ++r) {
      const size_t start = static_cast<size_t>(r) * c;
      const size_t take = start < count ? (count - start < c ? count - start : c) : 0;
      const char* s = static_cast<const char*>(srcs[i].data) + (take > 0 ? start * ss : 0);
      char* d = static_cast<char*>(dst) + (static_cast<size_t>(r) * slab + off[i]) * es;
      const cudaError_t er = emit({s, d, take, c - take});
      if (er != cudaSuccess) return er;
    }
    return cudaSuccess;
  });
}

cudaError_t LaunchChunkSplit(const void* src, DataType src_t, const ChunkLayout& layout, const Tensor* dsts, int n,
                             cudaStream_t stream) {
  cudaError_t e = CheckTypes(dsts, n);
  if (e != cudaSuccess || !IsFloatType(src_t) || layout.world < 1) return e != cudaSuccess ? e : cudaErrorInvalidValue;
  size_t slab = 0;
  const std::vector<size_t> off = SlabOffsets(layout, dsts, n, &slab);
  const size_t es = Size(src_t);
  return CopyByType<false, false, false>(dsts, n, src_t, {1.0f, nullptr}, stream, [&](int i, auto&& emit) {
    const size_t c = ChunkOf(layout, dsts[i], i), count = dsts[i].count, ds = Size(dsts[i].dtype);
    for (int r = 0; r < layout.world; ++r) {
      const size_t start = static_cast<size_t>(r) * c;
      if (start >= count) break;
      const size_t take = count - start < c ? count - start : c;
      const char* s = static_cast<const char*>(src) + (static_cast<size_t>(r) * slab + off[i]) * es;
      const cudaError_t er = emit({s, static_cast<char*>(dsts[i].data) + start * ds, take, 0});
      if (er != cudaSuccess) return er;
    }
    return cudaSuccess;
  });
}

}  // namespace cuda
}  // namespace kernels
}  // namespace weft
