#include "tests/faults/soak_steps.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "core/status.h"
#include "kernels/types.h"

namespace weft {
namespace soak {
namespace {

// Several buckets and several segments a bucket, as a small model has.
const std::vector<size_t> kGradCounts = {7, 300, 33, 1000, 5, 129, 2, 777};

// Integers in [-8, 8].
float GradValue(long long step, int rank, size_t g, size_t j) {
  return static_cast<float>(static_cast<int>((step * 7 + rank * 5 + static_cast<long long>(g * 3 + j)) % 17) - 8);
}

const std::vector<shard::ParamSpec> kParams = {{"w1", {7, 3}}, {"b1", {7}}, {"w2", {2, 7}}, {"scale", {}}};

// Parameter i's element j at step s, the same on every rank.
float ParamValue(long long s, size_t i, size_t j) {
  return static_cast<float>(static_cast<int>((s * 3 + static_cast<long long>(i * 11 + j)) % 13) - 6) / 2;
}
float ShardGrad(long long s, int rank, size_t i, size_t j) {
  return static_cast<float>(static_cast<int>((s + rank * 3 + static_cast<long long>(i + j)) % 9) - 4);
}

}  // namespace

long long ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

absl::Status StepSoak::Create() {
  std::vector<shard::GradSpec> specs;
  for (size_t c : kGradCounts) specs.push_back({c, DataType::kFloat32, MemKind::kHost, std::string()});
  shard::ReducerOptions o;
  o.bucket_cap_bytes = 4096;
  o.first_bucket_cap_bytes = 512;
  o.segment_bytes = 1024;
  ASSIGN_OR_RETURN(reducer_, shard::Reducer::Create(comm_, specs, o));
  for (size_t c : kGradCounts) grads_.emplace_back(c);
  ASSIGN_OR_RETURN(group_, shard::ShardGroup::Create(comm_, nullptr, kParams, shard::ShardGroupOptions{}, &pool_));
  for (const shard::ParamSpec& p : kParams) {
    size_t n = 1;
    for (auto d : p.shape) n *= static_cast<size_t>(d);
    full_.emplace_back(n);
  }
  return absl::OkStatus();
}

absl::Status StepSoak::Run(int steps) {
  for (int i = 0; i < steps; ++i) RETURN_IF_ERROR(ReducerStep());
  for (int i = 0; i < steps; ++i) RETURN_IF_ERROR(ShardStep());
  return absl::OkStatus();
}

absl::Status StepSoak::ReducerStep() {
  const long long step = reducer_steps_++;
  const int r = comm_->rank(), n = comm_->size();
  for (size_t g = 0; g < grads_.size(); ++g) {
    for (size_t j = 0; j < grads_[g].size(); ++j) grads_[g][j] = GradValue(step, r, g, j);
  }
  for (int g = static_cast<int>(grads_.size()) - 1; g >= 0; --g) {
    RETURN_IF_ERROR(Annotate(reducer_->MarkReady(g, grads_[static_cast<size_t>(g)].data(), nullptr),
                             "reducer step " + std::to_string(step)));
  }
  RETURN_IF_ERROR(Annotate(reducer_->Finalize(nullptr), "reducer step " + std::to_string(step)));
  for (size_t g = 0; g < grads_.size(); ++g) {
    for (size_t j = 0; j < grads_[g].size(); ++j) {
      double sum = 0;
      for (int q = 0; q < n; ++q) sum += GradValue(step, q, g, j);
      if (grads_[g][j] != static_cast<float>(sum / n)) {
        return InternalError("rank %d: reducer step %lld: gradient %zu element %zu is %g, not %g", r, step, g, j,
                        grads_[g][j], sum / n);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status StepSoak::ShardStep() {
  const long long step = shard_steps_++;
  const int r = comm_->rank(), n = comm_->size();
  const std::string at = "shard step " + std::to_string(step);
  // New parameters each step, so a gather that reused an old buffer shows.
  std::vector<const float*> ptrs;
  for (size_t i = 0; i < full_.size(); ++i) {
    for (size_t j = 0; j < full_[i].size(); ++j) full_[i][j] = ParamValue(step, i, j);
    ptrs.push_back(full_[i].data());
  }
  RETURN_IF_ERROR(Annotate(group_->LoadFromFull(ptrs), at));
  RETURN_IF_ERROR(Annotate(group_->ZeroGrads(), at));
  RETURN_IF_ERROR(Annotate(group_->Unshard(nullptr), at));
  for (size_t i = 0; i < full_.size(); ++i) {
    ASSIGN_OR_RETURN(void* p, group_->FullParam(static_cast<int>(i)));
    for (size_t j = 0; j < full_[i].size(); ++j) {
      if (static_cast<const float*>(p)[j] != full_[i][j]) {
        return InternalError("rank %d: %s: parameter %zu element %zu is %g, not %g", r, at, i, j,
                        static_cast<const float*>(p)[j], full_[i][j]);
      }
    }
  }
  std::vector<std::vector<float>> g(full_.size());
  std::vector<kernels::TensorRef> refs;
  for (size_t i = 0; i < full_.size(); ++i) {
    g[i].resize(full_[i].size());
    for (size_t j = 0; j < g[i].size(); ++j) g[i][j] = ShardGrad(step, r, i, j);
    refs.push_back({g[i].data(), g[i].size(), DataType::kFloat32});
  }
  RETURN_IF_ERROR(Annotate(group_->ReduceGrads(refs, nullptr), at));
  RETURN_IF_ERROR(Annotate(group_->Reshard(), at));
  if (pool_.stats().live_bytes != 0) {
    return InternalError("rank %d: %s: %zu bytes still live in the pool after Reshard", r, at,
                    static_cast<size_t>(pool_.stats().live_bytes));
  }
  const auto sh = group_->grads();
  for (const shard::ParamShard& ps : group_->shards()) {
    for (size_t k = 0; k < ps.length; ++k) {
      double sum = 0;
      for (int q = 0; q < n; ++q) sum += ShardGrad(step, q, ps.param, ps.param_offset + k);
      if (sh[ps.shard_offset + k] != static_cast<float>(sum / n)) {
        return InternalError("rank %d: %s: gradient shard of parameter %zu element %zu is %g, not %g", r, at,
                        static_cast<size_t>(ps.param), ps.param_offset + k, sh[ps.shard_offset + k], sum / n);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace soak
}  // namespace weft
