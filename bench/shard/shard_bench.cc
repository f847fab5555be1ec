// weft-shard-bench: fully sharded (ZeRO-3) steps on a GPT-style stack beside
// the DDP reducer on the same model, same run.
//
//   mpirun -np 4 --oversubscribe build/bench/shard/weft-shard-bench --compute auto
//   build/bench/shard/weft-shard-bench --ranks 4            # in-process ranks
//
// The model is a tensor list from bench/data (default GPT-2 small): one
// shard group per transformer block ("h.N."), one for the embeddings, one
// for the rest. A step is a simulated forward over the groups in order and a
// backward in reverse, sleeping for each group's compute (forward 1/3,
// backward 2/3 of --compute, spread by group size), like a GPU computing while
// the CPU drives communication. Modes, interleaved per iteration:
//   fsdp        ZeRO-3 through ShardSchedule: all-gather each group before its
//               forward and backward (the next group prefetched on the stream,
//               at most two in flight), reduce-scatter its gradients after its
//               backward (written in the unsharded layout: no packed copy)
//   fsdp-serial the same with no prefetch: every all-gather is exposed
//   ddp         the DDP reducer (gradient-as-bucket-view) marking each group's
//               gradients ready after its backward, Finalize at the end
// compute "auto" sets it to the fsdp step's median without compute (its
// communication time), the case where perfect overlap halves the step.
// Reported (medians, rank 0's clock, ranks aligned by a barrier before each
// step): step time, exposed communication (step - compute), and for fsdp the
// peak bytes per rank against the theory ((params + grads + Adam state) / N
// + the two largest groups).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/kernels/tensor_list.h"
#include "bench/world.h"
#include "core/stream.h"
#include "shard/reducer.h"
#include "shard/schedule.h"
#include "shard/shard_group.h"

namespace weft {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string list = "gpt2_small";
  int ranks = 4;
  int iters = 5;
  int warmup = 1;
  std::string compute = "0";  // ms per step, or "auto"
};

template <typename T>
T Check(absl::StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "weft-shard-bench: %s\n", std::string(v.status().message()).c_str());
    std::exit(1);
  }
  return std::move(v).value();
}
void Ok(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "weft-shard-bench: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}
double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Groups of the tensor list: "h.N." blocks, embeddings first, the rest last.
std::vector<std::vector<TensorSpec>> Group(const std::vector<TensorSpec>& list) {
  std::map<int, std::vector<TensorSpec>> blocks;
  std::vector<TensorSpec> embed, rest;
  for (const auto& t : list) {
    if (t.name.rfind("h.", 0) == 0) {
      blocks[std::atoi(t.name.c_str() + 2)].push_back(t);
    } else if (t.name.find("wte") != std::string::npos || t.name.find("wpe") != std::string::npos) {
      embed.push_back(t);
    } else {
      rest.push_back(t);
    }
  }
  std::vector<std::vector<TensorSpec>> groups;
  if (!embed.empty()) groups.push_back(embed);
  for (auto& [i, b] : blocks) groups.push_back(b);
  if (!rest.empty()) groups.push_back(rest);
  return groups;
}

class Bench {
 public:
  Bench(Communicator& comm, const std::vector<TensorSpec>& list) : comm_(comm), groups_(Group(list)) {
    for (const auto& g : groups_) {
      std::vector<shard::ParamSpec> specs;
      size_t n = 0;
      for (const auto& t : g) {
        specs.push_back({t.name, std::vector<int64_t>(t.shape.begin(), t.shape.end())});
        n += t.count;
      }
      sizes_.push_back(n);
      total_ += n;
      shards_.push_back(Check(shard::ShardGroup::Create(&comm, nullptr, specs, {}, &pool_)));
      adam_.emplace_back(2 * shards_.back()->master().size(), 0.0f);  // exp_avg, exp_avg_sq
    }
    std::vector<shard::GradSpec> grads;
    for (const auto& t : list) grads.push_back({t.count, DataType::kFloat32, MemKind::kHost, t.name});
    shard::ReducerOptions o;
    o.gradient_as_bucket_view = true;
    o.rebuild_buckets = false;
    ddp_ = Check(shard::Reducer::Create(&comm, grads, o));
    for (size_t g = 0, i = 0; g < groups_.size(); ++g) {
      std::vector<int> idx;
      for (size_t k = 0; k < groups_[g].size(); ++k) idx.push_back(static_cast<int>(i++));
      ddp_index_.push_back(idx);
    }
  }

  double compute_ms = 0;
  size_t total() const { return total_; }
  size_t num_groups() const { return groups_.size(); }

  // fsdp (through ShardSchedule: prefetch, two gathers in flight) and
  // fsdp-serial (every gather blocking); returns the step time.
  double Fsdp(bool prefetch) {
    Align();
    const auto t0 = Clock::now();
    const int n = static_cast<int>(groups_.size());
    shard::ShardSchedule* s = prefetch ? &schedule_ : nullptr;
    if (s != nullptr) Ok(s->BeginStep());
    for (int g = 0; g < n; ++g) {
      Ok(s != nullptr ? s->PreForward(shards_[g].get()) : shards_[g]->Unshard(nullptr));
      Compute(g, 1.0 / 3);
      Ok(s != nullptr ? s->PostForward(shards_[g].get()) : shards_[g]->Reshard());
    }
    for (int g = n - 1; g >= 0; --g) {
      Ok(s != nullptr ? s->PreBackward(shards_[g].get()) : shards_[g]->Unshard(nullptr));
      // Autograd's output for the group, written straight into the unsharded
      // layout (gradients as views of it), so the reduce-scatter needs no copy.
      void* grads = Check(pool_.Get(shards_[g]->full_numel() * sizeof(float)));
      Compute(g, 2.0 / 3);
      if (s != nullptr) {
        Ok(s->PostBackwardFlat(shards_[g].get(), grads, DataType::kFloat32));
      } else {
        Ok(shards_[g]->ReduceGradsFlat(grads, DataType::kFloat32, &stream_));
        Ok(shards_[g]->Reshard());
      }
      stream_.Enqueue([this, grads] {  // after its reduction
        pool_.Put(grads);
        return absl::OkStatus();
      });
    }
    Ok(s != nullptr ? s->EndStep() : stream_.Synchronize());
    return Ms(Clock::now() - t0);
  }

  double Ddp() {
    Align();
    const auto t0 = Clock::now();
    const int n = static_cast<int>(groups_.size());
    for (int g = 0; g < n; ++g) Compute(g, 1.0 / 3);
    for (int g = n - 1; g >= 0; --g) {
      Compute(g, 2.0 / 3);
      for (int i : ddp_index_[g]) Ok(ddp_->MarkReady(i, Slot(i), nullptr));
    }
    Ok(ddp_->Finalize(nullptr));
    return Ms(Clock::now() - t0);
  }

  // Bytes this rank holds at the fsdp step's peak: shards, gradient shards,
  // Adam state, and the pool's peak (gathered groups, reduce buffers, gradients).
  size_t FsdpPeakBytes() const {
    size_t b = pool_.stats().peak_live_bytes;
    for (size_t g = 0; g < shards_.size(); ++g) b += (2 + 2) * shards_[g]->master().size() * sizeof(float);
    return b;
  }
  size_t TheoryBytes() const {
    std::vector<size_t> s = sizes_;
    std::sort(s.rbegin(), s.rend());
    const size_t two = s.size() > 1 ? s[0] + s[1] : s.empty() ? 0 : s[0];
    return (4 * total_ * sizeof(float)) / comm_.size() + two * sizeof(float);
  }

 private:
  void Align() { Ok(comm_.Barrier()); }
  void Compute(int g, double share) {
    if (compute_ms <= 0) return;
    const double ms = compute_ms * share * static_cast<double>(sizes_[g]) / static_cast<double>(total_);
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  }
  void* Slot(int i) { return Check(ddp_->GradSlot(i)); }

  Communicator& comm_;
  std::vector<std::vector<TensorSpec>> groups_;
  std::vector<size_t> sizes_;
  size_t total_ = 0;
  shard::BufferPool pool_;
  HostStream stream_;
  shard::ShardSchedule schedule_{&stream_, /*reshard_after_forward=*/true};
  std::vector<std::unique_ptr<shard::ShardGroup>> shards_;
  std::vector<std::vector<float>> adam_;
  std::unique_ptr<shard::Reducer> ddp_;
  std::vector<std::vector<int>> ddp_index_;
};

void Run(Communicator& comm, const std::vector<TensorSpec>& list, const Args& args) {
  Bench b(comm, list);
  auto measure = [&](std::vector<double>& fsdp, std::vector<double>& serial, std::vector<double>& ddp) {
    for (int it = 0; it < args.warmup + args.iters; ++it) {
      const double f = b.Fsdp(true), s = b.Fsdp(false), d = b.Ddp();
      if (it >= args.warmup) fsdp.push_back(f), serial.push_back(s), ddp.push_back(d);
    }
  };
  std::vector<double> f0, s0, d0;
  measure(f0, s0, d0);  // communication alone
  double compute = std::atof(args.compute.c_str());
  if (args.compute == "auto") compute = Median(f0);
  std::vector<double> f1, s1, d1;
  if (compute > 0) {
    b.compute_ms = compute;
    measure(f1, s1, d1);
  }
  if (comm.rank() != 0) return;
  std::printf("# weft-shard-bench: %s, %zu parameters in %zu groups, %d ranks (%s), %d iterations (medians, ms)\n",
              args.list.c_str(), b.total(), b.num_groups(), comm.size(), Name(comm.backend()), args.iters);
  std::printf("%-12s %12s %12s %12s %14s\n", "mode", "comm-only", "compute", "step", "step/max(c,m)");
  const double fm = Median(f0), sm = Median(s0), dm = Median(d0);
  auto row = [&](const char* name, double comm_only, const std::vector<double>& with) {
    if (compute > 0) {
      const double step = Median(with);
      std::printf("%-12s %12.1f %12.1f %12.1f %14.2f\n", name, comm_only, compute, step,
                  step / std::max(compute, comm_only));
    } else {
      std::printf("%-12s %12.1f %12s %12s %14s\n", name, comm_only, "-", "-", "-");
    }
  };
  row("fsdp", fm, f1);
  row("fsdp-serial", sm, s1);
  row("ddp", dm, d1);
  std::printf("# fsdp peak bytes per rank: %zu (shards + grad shards + Adam state + pool peak); theory %zu "
              "((params + grads + Adam) / N + two largest groups): ratio %.2f\n",
              b.FsdpPeakBytes(), b.TheoryBytes(), static_cast<double>(b.FsdpPeakBytes()) / b.TheoryBytes());
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--list") a.list = v;
    else if (k == "--ranks") a.ranks = std::atoi(v.c_str());
    else if (k == "--iters") a.iters = std::atoi(v.c_str());
    else if (k == "--warmup") a.warmup = std::atoi(v.c_str());
    else if (k == "--compute") a.compute = v;
    else {
      std::fprintf(stderr, "usage: %s [--list NAME|PATH] [--ranks N] [--iters N] [--warmup N] [--compute MS|auto]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (a.ranks < 1 || a.iters < 1 || a.warmup < 0) {
    std::fprintf(stderr, "weft-shard-bench: --ranks and --iters must be at least 1, --warmup at least 0\n");
    std::exit(2);
  }
  return a;
}

}  // namespace
}  // namespace bench
}  // namespace weft

int main(int argc, char** argv) {
  using namespace weft;
  const bench::Args args = bench::Parse(argc, argv);
  const auto list = bench::Check(bench::ReadTensorList(bench::TensorListPath(args.list)));
  bench::Ok(bench::RunOnWorld(args.ranks, 300000, [&](Communicator& comm) { bench::Run(comm, list, args); }));
  return 0;
}
