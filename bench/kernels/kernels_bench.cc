// Host kernel microbenchmarks on real tensor lists (bench/data/*.tensors),
// each beside memcpy of the same tensors into the same flat buffer, measured
// in the same binary: the ceiling the kernels are judged against. The copies
// are timed twice: as one-shot calls (kernels/kernels.h, which list and check
// the tensors on every call) and as a CopyPlan made once (kernels/copy_plan.h).
//
// Bytes are what the kernel reads plus what it writes (memcpy of N float32
// elements: 8N; flatten to bfloat16: 4N + 2N; unflatten-accumulate bfloat16
// into float32: 2N + 4N + 4N), so bytes_per_second compares across kernels.
//
//   WEFT_NUM_THREADS=1 build/bench/kernels/weft-kernels-bench
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true  (one command line)
// Compare a kernel's median bytes_per_second with memcpy's on the same list.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/kernels/tensor_list.h"
#include "core/thread_pool.h"
#include "kernels/copy_plan.h"
#include "kernels/cpu/cpu.h"
#include "kernels/kernels.h"

namespace weft {
namespace bench {
namespace {

using kernels::TensorRef;

constexpr const char* kLists[] = {"resnet50", "gpt2_small", "bert_base", "llama_layer", "tiny_10k", "huge_3"};

// One list's buffers: each tensor a separate float32 allocation (as a
// model's parameters are), a flat float32 buffer and a flat bfloat16 one.
// Kept while the benchmarks of that list run, then replaced by the next list's.
struct Inputs {
  std::string list;
  std::vector<std::unique_ptr<float[]>> tensors;
  std::vector<TensorRef> refs;
  std::vector<size_t> offsets;
  std::unique_ptr<float[]> flat;
  std::unique_ptr<uint16_t[]> flat_bf16;
  size_t total = 0;
};

const Inputs& Load(const std::string& list) {
  static Inputs* cur = new Inputs();
  if (cur->list == list) return *cur;
  delete cur;
  cur = new Inputs();
  absl::StatusOr<std::vector<TensorSpec>> specs = ReadTensorList(std::string(WEFT_BENCH_DATA_DIR) + "/" + list + ".tensors");
  if (!specs.ok()) {
    std::fprintf(stderr, "%s\n", std::string(specs.status().message()).c_str());
    return *cur;
  }
  cur->list = list;
  uint32_t x = 1;
  auto next = [&] {  // finite, normal values: speed should not depend on subnormal handling
    x = x * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int32_t>(x >> 8) - (1 << 23)) * 0x1p-20f;
  };
  for (const TensorSpec& s : *specs) {
    cur->tensors.emplace_back(new float[s.count]);
    for (size_t k = 0; k < s.count; ++k) cur->tensors.back()[k] = next();
    cur->refs.push_back({cur->tensors.back().get(), s.count, DataType::kFloat32});
    cur->offsets.push_back(cur->total);
    cur->total += s.count;
  }
  cur->flat.reset(new float[cur->total]);
  cur->flat_bf16.reset(new uint16_t[cur->total]);
  for (size_t k = 0; k < cur->total; ++k) {
    cur->flat[k] = next();
    cur->flat_bf16[k] = FloatToBf16(next());
  }
  return *cur;
}

void Finish(benchmark::State& state, const Inputs& in, size_t bytes_per_element) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * in.total * bytes_per_element));
  state.counters["tensors"] = static_cast<double>(in.refs.size());
  state.counters["elements"] = static_cast<double>(in.total);
}

void Check(benchmark::State& state, const absl::Status& s) {
  if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
}

void Memcpy(benchmark::State& state, const std::string& list) {
  const Inputs& in = Load(list);
  for (auto _ : state) {
    for (size_t i = 0; i < in.refs.size(); ++i) {
      std::memcpy(in.flat.get() + in.offsets[i], in.refs[i].data, in.refs[i].count * sizeof(float));
    }
    benchmark::ClobberMemory();
  }
  Finish(state, in, 8);
}

void FlattenF32(benchmark::State& state, const std::string& list) {
  const Inputs& in = Load(list);
  for (auto _ : state) Check(state, kernels::Flatten(in.refs, in.flat.get(), DataType::kFloat32, nullptr, 1.0f, nullptr));
  Finish(state, in, 8);
}

void FlattenBf16Scaled(benchmark::State& state, const std::string& list) {
  const Inputs& in = Load(list);
  for (auto _ : state) {
    Check(state, kernels::Flatten(in.refs, in.flat_bf16.get(), DataType::kBfloat16, nullptr, 0.125f, nullptr));
  }
  Finish(state, in, 6);
}

void UnflattenAccumulateBf16(benchmark::State& state, const std::string& list) {
  const Inputs& in = Load(list);
  for (auto _ : state) {
    // Scale 0: the float32 tensors keep their values however often this runs.
    Check(state, kernels::Unflatten(in.flat_bf16.get(), DataType::kBfloat16, nullptr, in.refs, 0.0f, true, nullptr));
  }
  Finish(state, in, 10);
}

// The same three copies through a CopyPlan made once before timing, as the
// reducer's buckets and the shard groups can: each iteration only runs it.
void RunPlan(benchmark::State& state, const Inputs& in, const absl::StatusOr<kernels::CopyPlan>& plan, float scale,
             size_t bytes_per_element) {
  if (!plan.ok()) {
    state.SkipWithError(std::string(plan.status().message()).c_str());
    return;
  }
  for (auto _ : state) Check(state, plan->Run(scale, nullptr));
  Finish(state, in, bytes_per_element);
}

void FlattenF32Planned(benchmark::State& state, const std::string& list) {
  const Inputs& in = Load(list);
  RunPlan(state, in, kernels::CopyPlan::Flatten(in.refs, in.flat.get(), DataType::kFloat32, nullptr), 1.0f, 8);
}

void FlattenBf16ScaledPlanned(benchmark::State& state, const std::string& list) {
  const Inputs& in = Load(list);
  RunPlan(state, in, kernels::CopyPlan::Flatten(in.refs, in.flat_bf16.get(), DataType::kBfloat16, nullptr), 0.125f,
          6);
}

void UnflattenAccumulateBf16Planned(benchmark::State& state, const std::string& list) {
  const Inputs& in = Load(list);
  RunPlan(state, in,
          kernels::CopyPlan::Unflatten(in.flat_bf16.get(), DataType::kBfloat16, nullptr, in.refs, /*accumulate=*/true),
          0.0f, 10);
}

void UnscaleF32(benchmark::State& state, const std::string& list) {
  const Inputs& in = Load(list);
  int found = 0;
  // Alternating 2 and 0.5 keeps the values where they started.
  float inv = 2.0f;
  for (auto _ : state) {
    Check(state, kernels::UnscaleCheckFinite(in.refs, inv, &found, nullptr));
    inv = 1.0f / inv;
  }
  Finish(state, in, 8);
}

void L2NormF32(benchmark::State& state, const std::string& list) {
  const Inputs& in = Load(list);
  std::vector<float> norms(in.refs.size());
  float total = 0;
  for (auto _ : state) {
    Check(state, kernels::L2Norm(in.refs, norms.data(), &total, nullptr));
    benchmark::DoNotOptimize(total);
  }
  Finish(state, in, 4);
}

// With one kernel thread, rates are per CPU second of this thread, which a
// busy shared machine disturbs least; with several, wall-clock time is the
// only honest measure (the workers' CPU time is not counted).
void RegisterAll() {
  const int threads = ThreadPool::Default().threads();
  benchmark::AddCustomContext("weft_threads", std::to_string(threads));
  benchmark::AddCustomContext("weft_timing", threads == 1 ? "cpu time of the one thread" : "real time");
  benchmark::AddCustomContext("weft_isa", kernels::cpu::IsaName());
  for (const char* list : kLists) {
    const std::string l = list;
    auto reg = [&](const char* name, void (*fn)(benchmark::State&, const std::string&)) {
      benchmark::internal::Benchmark* b =
          benchmark::RegisterBenchmark((std::string(name) + "/" + l).c_str(), fn, l);
      b->Unit(benchmark::kMillisecond)->MinTime(0.2);
      if (threads > 1) b->UseRealTime();
    };
    reg("memcpy", Memcpy);
    reg("flatten_f32_f32", FlattenF32);
    reg("flatten_f32_bf16_scaled", FlattenBf16Scaled);
    reg("unflatten_acc_bf16_f32", UnflattenAccumulateBf16);
    reg("flatten_f32_f32_planned", FlattenF32Planned);
    reg("flatten_f32_bf16_scaled_planned", FlattenBf16ScaledPlanned);
    reg("unflatten_acc_bf16_f32_planned", UnflattenAccumulateBf16Planned);
    reg("unscale_f32", UnscaleF32);
    reg("l2norm_f32", L2NormF32);
  }
}

}  // namespace
}  // namespace bench
}  // namespace weft

int main(int argc, char** argv) {
  weft::bench::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
