// The copy engine behind flatten, unflatten, chunk_cat and chunk_split (their
// layouts reach here as kernels/types.h segments, planned by kernels/plan.cc)
// and AMP unscale: one converting copy kernel over segments (segment.cuh),
// instantiated per (source, destination) float type pair and Mode, reading
// its runs from the parameters (one-shot calls) or from a plan's table in
// device memory (CopyPlanCreate, at the end).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

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

// The units of one list of runs, from the kernel's parameters (a Batch) or
// from a plan's table in device memory; run_of(u) is the run holding unit u.
template <class S, class D, Mode kMode, class RunOf>
__device__ __forceinline__ void CopyUnits(const Run* runs, const uint32_t* unit_start, uint32_t units,
                                          RunOf run_of, const CopyArgs& args) {
  using SR = typename S::Raw;
  using DR = typename D::Raw;
  bool bad = false;
  for (uint32_t u = blockIdx.x; u < units; u += gridDim.x) {
    const uint32_t s = run_of(u);
    const Run& seg = runs[s];
    const uint64_t begin = static_cast<uint64_t>(u - unit_start[s]) * kChunk;
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
__global__ void __launch_bounds__(kThreads) CopyKernel(const __grid_constant__ Batch batch, const CopyArgs args) {
  CopyUnits<S, D, kMode>(
      batch.seg, batch.unit_start, batch.units, [&](uint32_t u) { return static_cast<uint32_t>(FindRun(batch, u)); },
      args);
}

template <class S, class D, Mode kMode>
__global__ void __launch_bounds__(kThreads) CopyTableKernel(const Table table, const CopyArgs args) {
  CopyUnits<S, D, kMode>(table.seg, table.unit_start, table.units, [&](uint32_t u) { return table.run_of_unit[u]; },
                         args);
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

static_assert(static_cast<int>(DataType::kFloat32) == 0 && static_cast<int>(DataType::kFloat16) == 1 &&
                  static_cast<int>(DataType::kBfloat16) == 2 && static_cast<int>(DataType::kFloat64) == 3,
              "pair indices assume the float types are 0..3");
constexpr int kPairs = 16;

// A launch covers one (source, destination) type pair: 4 * destination +
// source. Zero fills (src == nullptr) go with the pair (destination,
// destination), whose kernel writes the zeros.
int PairOf(const Segment& g) {
  return static_cast<int>(g.dst_t) * 4 + static_cast<int>(g.src != nullptr ? g.src_t : g.dst_t);
}

Run RunOf(const Segment& g) { return g.src != nullptr ? Run{g.src, g.dst, g.count, 0} : Run{nullptr, g.dst, 0, g.count}; }

// The pairs present among the segments, as bits; false on a type that is not a float type.
bool PairsPresent(const Segment* segments, size_t n, unsigned* present) {
  *present = 0;
  for (size_t k = 0; k < n; ++k) {
    if (!IsFloatType(segments[k].dst_t) || (segments[k].src != nullptr && !IsFloatType(segments[k].src_t))) {
      return false;
    }
    *present |= 1u << PairOf(segments[k]);
  }
  return true;
}

// f(pair, S{}, D{}) for every pair present, in pair order.
template <class F>
cudaError_t ForEachPair(unsigned present, F&& f) {
  for (int pair = 0; pair < kPairs; ++pair) {
    if ((present & (1u << pair)) == 0) continue;
    const cudaError_t e = WithType(static_cast<DataType>(pair % 4), [&](auto s) {
      return WithType(static_cast<DataType>(pair / 4), [&](auto d) { return f(pair, s, d); });
    });
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
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
  unsigned present = 0;
  if (!PairsPresent(segments, n, &present)) return cudaErrorInvalidValue;
  // A batch holds one type pair: one pass over the segments per pair present.
  BatchBuilder bb(/*keep_empty=*/false);
  return ForEachPair(present, [&](int pair, auto s, auto d) {
    auto flush = [&](const Batch& b) { return LaunchPair<decltype(s), decltype(d)>(b, args, accumulate, st); };
    for (size_t k = 0; k < n; ++k) {
      if (PairOf(segments[k]) != pair) continue;
      const cudaError_t ek = bb.Add(RunOf(segments[k]), static_cast<uint32_t>(k), flush);
      if (ek != cudaSuccess) return ek;
    }
    return bb.Finish(flush);
  });
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

// ---------------------------------------------------------------- plans
// What CopySegments builds on every call, built once: the runs of each type
// pair as a Table in device memory (one allocation, uploaded at creation),
// with each mode's kernel and grid resolved. A run is then one launch per
// pair present with the table's address in the parameters.

namespace {

// The modes a plan may run in; a run picks one from its scale.
enum PlanMode { kPlanBitCopy, kPlanConvert, kPlanAccumulate, kPlanModes };

struct PlanGroup {
  Table table;                     // pointers into DevicePlan::table
  const void* kernel[kPlanModes];  // nullptr where the mode cannot occur
  int grid[kPlanModes];
};

template <class S, class D>
void TableKernels(bool accumulate, const void* (&kernel)[kPlanModes]) {
  kernel[kPlanBitCopy] = kernel[kPlanConvert] = kernel[kPlanAccumulate] = nullptr;
  if (accumulate) {
    kernel[kPlanAccumulate] = reinterpret_cast<const void*>(&CopyTableKernel<S, D, Mode::kAccumulate>);
    return;
  }
  kernel[kPlanConvert] = reinterpret_cast<const void*>(&CopyTableKernel<S, D, Mode::kConvert>);
  if constexpr (std::is_same_v<S, D>) {
    kernel[kPlanBitCopy] = reinterpret_cast<const void*>(&CopyTableKernel<S, D, Mode::kBitCopy>);
  }
}

}  // namespace

struct DevicePlan {
  int device = 0;
  bool accumulate = false;
  void* table = nullptr;  // every group's runs, then their unit starts, then their units' runs
  int groups = 0;
  PlanGroup group[kPairs];
};

int CopyPlanCreate(const Segment* segments, size_t n, bool accumulate, DevicePlan** out) {
  *out = nullptr;
  unsigned present = 0;
  if (!PairsPresent(segments, n, &present)) return cudaErrorInvalidValue;
  std::unique_ptr<DevicePlan> plan(new DevicePlan());
  plan->accumulate = accumulate;
  cudaError_t e = cudaGetDevice(&plan->device);
  if (e != cudaSuccess) return e;

  // The table on the host: runs grouped by pair, each group's unit starts
  // and the run of each of its units (group-local indices).
  struct Where {
    size_t first_run, first_start, first_unit;
  } where[kPairs] = {};
  std::vector<Run> runs;
  std::vector<uint32_t> starts, owner;
  runs.reserve(n);
  starts.reserve(n + kPairs);
  e = ForEachPair(present, [&](int pair, auto s, auto d) {
    PlanGroup& g = plan->group[plan->groups];
    where[plan->groups] = {runs.size(), starts.size(), owner.size()};
    uint64_t units = 0;
    uint32_t count = 0;
    for (size_t k = 0; k < n; ++k) {
      if (PairOf(segments[k]) != pair) continue;
      const Run r = RunOf(segments[k]);
      const uint64_t u = Units(r.n + r.zeros);
      if (u == 0) continue;
      if (units + u > UINT32_MAX) return cudaErrorInvalidValue;  // 2^46 elements of one pair
      runs.push_back(r);
      starts.push_back(static_cast<uint32_t>(units));
      owner.insert(owner.end(), u, count);
      units += u;
      ++count;
    }
    starts.push_back(static_cast<uint32_t>(units));
    g.table.count = count;
    g.table.units = static_cast<uint32_t>(units);
    if (units == 0) return cudaSuccess;  // nothing of this pair to copy: no group
    TableKernels<decltype(s), decltype(d)>(accumulate, g.kernel);
    for (int m = 0; m < kPlanModes; ++m) {
      g.grid[m] = 0;
      if (g.kernel[m] == nullptr) continue;
      // A fresh cache: asks the occupancy now, which also loads the kernel,
      // so the first run needs no module loading (and can be captured).
      std::atomic<int> per_sm{0};
      const cudaError_t ge = GridSize(g.kernel[m], per_sm, g.table.units, &g.grid[m]);
      if (ge != cudaSuccess) return ge;
    }
    ++plan->groups;
    return cudaSuccess;
  });
  if (e != cudaSuccess) return e;

  if (plan->groups > 0) {
    // One allocation: the runs, then the unit starts, then the units' runs.
    const size_t run_bytes = runs.size() * sizeof(Run);
    const size_t start_bytes = starts.size() * sizeof(uint32_t);
    e = cudaMalloc(&plan->table, run_bytes + start_bytes + owner.size() * sizeof(uint32_t));
    if (e != cudaSuccess) {
      plan->table = nullptr;
      return e;
    }
    auto* dev_runs = static_cast<Run*>(plan->table);
    auto* dev_starts = reinterpret_cast<uint32_t*>(static_cast<char*>(plan->table) + run_bytes);
    uint32_t* dev_owner = dev_starts + starts.size();
    e = cudaMemcpy(dev_runs, runs.data(), run_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(dev_starts, starts.data(), start_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
      e = cudaMemcpy(dev_owner, owner.data(), owner.size() * sizeof(uint32_t), cudaMemcpyHostToDevice);
    }
    // From pageable memory, cudaMemcpy returns once the bytes are staged, not
    // once they are in device memory (CUDA's "API synchronization behavior"),
    // and a run on a non-blocking stream is not ordered after the legacy
    // stream's copy: wait for it, or the first run may read a partial table.
    if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamLegacy);
    if (e != cudaSuccess) {
      (void)cudaFree(plan->table);
      return e;
    }
    for (int i = 0; i < plan->groups; ++i) {
      plan->group[i].table.seg = dev_runs + where[i].first_run;
      plan->group[i].table.unit_start = dev_starts + where[i].first_start;
      plan->group[i].table.run_of_unit = dev_owner + where[i].first_unit;
    }
  }
  *out = plan.release();
  return cudaSuccess;
}

int CopyPlanRun(const DevicePlan* plan, float scale, void* stream) {
  if (plan->groups == 0) return cudaSuccess;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  if (device != plan->device) return cudaErrorInvalidDevice;
  CopyArgs args{scale, nullptr};
  for (int i = 0; i < plan->groups; ++i) {
    const PlanGroup& g = plan->group[i];
    const int mode = plan->accumulate                                         ? kPlanAccumulate
                     : scale == 1.0f && g.kernel[kPlanBitCopy] != nullptr ? kPlanBitCopy
                                                                              : kPlanConvert;
    Table table = g.table;
    void* params[] = {&table, &args};
    e = cudaLaunchKernel(g.kernel[mode], dim3(static_cast<unsigned>(g.grid[mode])), dim3(kThreads), params, 0,
                         static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

int CopyPlanDestroy(DevicePlan* plan) {
  if (plan == nullptr) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  if (plan->table != nullptr) {
    int current = 0;
    e = cudaGetDevice(&current);
    const bool switched = e == cudaSuccess && current != plan->device;
    if (switched) e = cudaSetDevice(plan->device);
    // Runs may still be queued on any number of the device's streams, which
    // the plan does not track: waiting for the whole device covers them all.
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    // Freed only once nothing can read it; after a failed wait (a capture in
    // progress, a dead context) the table is left allocated instead.
    if (e == cudaSuccess) e = cudaFree(plan->table);
    if (switched) (void)cudaSetDevice(current);
  }
  delete plan;
  return e;
}

}  // namespace cuda
}  // namespace kernels
}  // namespace weft
