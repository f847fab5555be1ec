// Google Benchmark of the bucket plan (shard/bucket_plan.h): planning must
// stay negligible at creation and at the rebuild, even for 10,000 tensors.
//
//   build/bench/reducer/weft-plan-bench
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "bench/kernels/tensor_list.h"
#include "shard/bucket_plan.h"

namespace weft {
namespace bench {
namespace {

std::vector<shard::GradSpec> Load(const std::string& name) {
  auto list = ReadTensorList(std::string(WEFT_BENCH_DATA_DIR) + "/" + name + ".tensors");
  std::vector<shard::GradSpec> specs;
  if (!list.ok()) return specs;
  for (const auto& t : *list) specs.push_back({t.count, DataType::kFloat32, MemKind::kHost, t.name});
  return specs;
}

void BM_PlanBuckets(benchmark::State& state, const std::string& name, bool shuffled) {
  const std::vector<shard::GradSpec> grads = Load(name);
  if (grads.empty()) {
    state.SkipWithError(("cannot read bench/data/" + name + ".tensors").c_str());
    return;
  }
  shard::PlanOptions o;
  if (shuffled) {  // a rebuild from an observed ready order
    for (size_t i = 0; i < grads.size(); ++i) o.order.push_back(static_cast<int>((i * 7919) % grads.size()));
  }
  size_t buckets = 0;
  for (auto _ : state) {
    auto plan = shard::PlanBuckets(grads, o);
    benchmark::DoNotOptimize(plan);
    buckets = plan.ok() ? plan->buckets.size() : 0;
  }
  state.counters["tensors"] = static_cast<double>(grads.size());
  state.counters["buckets"] = static_cast<double>(buckets);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(grads.size()));
}

BENCHMARK_CAPTURE(BM_PlanBuckets, tiny_10k, std::string("tiny_10k"), false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlanBuckets, tiny_10k_rebuild, std::string("tiny_10k"), true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlanBuckets, resnet50, std::string("resnet50"), false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlanBuckets, bert_base, std::string("bert_base"), false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_PlanBuckets, gpt2_small, std::string("gpt2_small"), false)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace bench
}  // namespace weft

BENCHMARK_MAIN();
