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
// the CPU drives communication. The compute runs on a simulated device clock
// (--device-clock on, the default): a group's compute starts when the device
// is free and its gather has completed (ShardSchedule::GatheredAt, the stream's
// completion time, not when this thread got a core back), and the thread
// sleeps until the device would be done. So a late wake-up on a busy machine
// delays what the CPU enqueues next, as it would with a GPU, but is not
// booked as compute; it is reported separately. --device-clock off sleeps
// each compute from when the thread gets there (every wake-up delay adds).
// Modes, interleaved per iteration:
//   fsdp        ZeRO-3 through ShardSchedule: all-gather each group before its
//               forward and backward (the next group prefetched on the stream,
//               at most two in flight), reduce-scatter its gradients after its
//               backward (written in the unsharded layout: no packed copy)
//   fsdp-serial the same with no prefetch: every all-gather is exposed
//   ddp         the DDP reducer (gradient-as-bucket-view) marking each group's
//               gradients ready after its backward, Finalize at the end
// --split N|auto cuts groups larger than N elements (auto: the largest
// block) into row pieces that pipeline like blocks (Group below).
// --root keep keeps the embeddings' groups gathered from their forward to
// their backward (ShardSchedule::SetReshardAfterForward), as FSDP treats its
// root; --root reshard (the default) releases them like every other group.
// compute "auto" sets it to the fsdp step's median without compute (its
// communication time), the case where perfect overlap halves the step.
// Reported (medians, rank 0's clock, ranks aligned by a barrier before each
// step): step time, and for fsdp where it waited (the compute as it ran,
// gathers in forward and backward, reductions left after the backward) and
// the peak bytes per rank against the theory ((params + grads + Adam state)
// / N + the two largest groups).
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
#include "core/status.h"
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
  std::string backend = "mpi";  // under mpirun/srun: mpi or ucx
  int ranks = 4;
  int iters = 5;
  int warmup = 1;
  std::string compute = "0";  // ms per step, or "auto"
  std::string split = "0";    // largest group in elements before it is split; "auto": the largest block
  bool device_clock = true;
  bool keep_root = false;     // FSDP's root: the embeddings stay gathered from their forward to their backward
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

// One shard group's parameter: a whole tensor of the list, or a range of
// its rows when a group too large to pipeline is split (--split).
struct Piece {
  TensorSpec spec;     // the piece's name, shape and count
  int tensor = 0;      // index in the tensor list
  bool last = true;    // the tensor's gradient is complete after this piece's backward
};

// Groups of the tensor list: "h.N." blocks, embeddings first, the rest last.
// With `max_group` > 0, a group larger than that is split into pieces of at
// most about that many elements along its tensors' first dimension (the
// embedding rows), so the pieces pipeline like blocks: the gather of piece
// k+1 overlaps the compute of piece k, and the reduce-scatter of piece k the
// backward of piece k-1.
std::vector<std::vector<Piece>> Group(const std::vector<TensorSpec>& list, size_t max_group) {
  std::map<int, std::vector<Piece>> blocks;
  std::vector<Piece> embed, rest;
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    const Piece p{t, static_cast<int>(i), true};
    if (t.name.rfind("h.", 0) == 0) {
      blocks[std::atoi(t.name.c_str() + 2)].push_back(p);
    } else if (t.name.find("wte") != std::string::npos || t.name.find("wpe") != std::string::npos) {
      embed.push_back(p);
    } else {
      rest.push_back(p);
    }
  }
  std::vector<std::vector<Piece>> groups;
  if (!embed.empty()) groups.push_back(embed);
  for (auto& [i, b] : blocks) groups.push_back(b);
  if (!rest.empty()) groups.push_back(rest);
  if (max_group == 0) return groups;
  std::vector<std::vector<Piece>> out;
  for (auto& g : groups) {
    std::vector<Piece> cur;
    size_t cur_n = 0;
    auto flush = [&] {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
      cur_n = 0;
    };
    for (const Piece& p : g) {
      const size_t rows = p.spec.shape.empty() ? 1 : p.spec.shape[0];
      const size_t row = rows == 0 ? 0 : p.spec.count / rows;
      if (p.spec.count <= max_group || row == 0) {
        if (cur_n + p.spec.count > max_group) flush();
        cur.push_back(p);
        cur_n += p.spec.count;
        continue;
      }
      flush();
      const size_t k = (p.spec.count + max_group - 1) / max_group;
      const size_t per = (rows + k - 1) / k;
      // Backward runs the pieces in reverse: the tensor is complete after its first piece.
      for (size_t r0 = 0; r0 < rows; r0 += per) {
        Piece q = p;
        q.spec.shape[0] = std::min(per, rows - r0);
        q.spec.count = q.spec.shape[0] * row;
        q.spec.name = p.spec.name + "[" + std::to_string(r0) + ":" + std::to_string(r0 + q.spec.shape[0]) + "]";
        q.last = r0 == 0;
        out.push_back({q});
      }
    }
    flush();
  }
  return out;
}

// A group of the embeddings (or of their rows): FSDP's root.
bool IsEmbedding(const std::vector<Piece>& g) {
  for (const Piece& p : g) {
    if (p.spec.name.find("wte") == std::string::npos && p.spec.name.find("wpe") == std::string::npos) return false;
  }
  return !g.empty();
}

// The largest "h.N." block: the size --split auto cuts larger groups to.
size_t LargestBlock(const std::vector<TensorSpec>& list) {
  std::map<int, size_t> blocks;
  for (const auto& t : list) {
    if (t.name.rfind("h.", 0) == 0) blocks[std::atoi(t.name.c_str() + 2)] += t.count;
  }
  size_t most = 0;
  for (const auto& [i, n] : blocks) most = std::max(most, n);
  return most;
}

class Bench {
 public:
  Bench(Communicator& comm, const std::vector<TensorSpec>& list, size_t max_group, bool keep_root)
      : comm_(comm), groups_(Group(list, max_group)) {
    for (const auto& g : groups_) {
      std::vector<shard::ParamSpec> specs;
      size_t n = 0;
      for (const auto& p : g) {
        specs.push_back({p.spec.name, std::vector<int64_t>(p.spec.shape.begin(), p.spec.shape.end())});
        n += p.spec.count;
      }
      sizes_.push_back(n);
      total_ += n;
      shards_.push_back(Check(shard::ShardGroup::Create(&comm, nullptr, specs, {}, &pool_)));
      adam_.emplace_back(2 * shards_.back()->master().size(), 0.0f);  // exp_avg, exp_avg_sq
      if (keep_root && IsEmbedding(g)) {
        Ok(schedule_.SetReshardAfterForward(shards_.back().get(), false));
        ++kept_;
      }
    }
    std::vector<shard::GradSpec> grads;
    for (const auto& t : list) grads.push_back({t.count, DataType::kFloat32, MemKind::kHost, t.name});
    shard::ReducerOptions o;
    o.gradient_as_bucket_view = true;
    o.rebuild_buckets = false;
    ddp_ = Check(shard::Reducer::Create(&comm, grads, o));
    for (const auto& g : groups_) {
      std::vector<int> idx;
      for (const Piece& p : g) {
        if (p.last) idx.push_back(p.tensor);
      }
      ddp_index_.push_back(idx);
    }
  }

  double compute_ms = 0;
  bool device_clock = true;
  size_t total() const { return total_; }
  size_t num_groups() const { return groups_.size(); }
  int kept() const { return kept_; }

  // fsdp (through ShardSchedule: prefetch, two gathers in flight) and
  // fsdp-serial (every gather blocking); returns the step time.
  double Fsdp(bool prefetch) {
    Align();
    const auto t0 = Clock::now();
    const int n = static_cast<int>(groups_.size());
    shard::ShardSchedule* s = prefetch ? &schedule_ : nullptr;
    Waits w;
    device_ = t0;
    // When group g's gather completed: the schedule's stream says; a blocking
    // Unshard completed when it returned.
    auto gathered = [&](int g) { return s != nullptr ? Check(s->GatheredAt(shards_[g].get())) : Clock::now(); };
    if (s != nullptr) Ok(s->BeginStep());
    for (int g = 0; g < n; ++g) {
      w.forward += Timed([&] { return s != nullptr ? s->PreForward(shards_[g].get()) : shards_[g]->Unshard(nullptr); });
      w.compute += Timed([&] { return Compute(g, 1.0 / 3, gathered(g), &w.idle_forward, &w.late); });
      Ok(s != nullptr ? s->PostForward(shards_[g].get()) : shards_[g]->Reshard());
    }
    for (int g = n - 1; g >= 0; --g) {
      w.backward +=
          Timed([&] { return s != nullptr ? s->PreBackward(shards_[g].get()) : shards_[g]->Unshard(nullptr); });
      // Autograd's output for the group, written straight into the unsharded
      // layout (gradients as views of it), so the reduce-scatter needs no copy.
      void* grads = Check(pool_.Get(shards_[g]->full_numel() * sizeof(float)));
      w.compute += Timed([&] { return Compute(g, 2.0 / 3, gathered(g), &w.idle_backward, &w.late); });
      w.backward += Timed([&] {
        if (s != nullptr) return s->PostBackwardFlat(shards_[g].get(), grads, DataType::kFloat32);
        RETURN_IF_ERROR(shards_[g]->ReduceGradsFlat(grads, DataType::kFloat32, &stream_));
        return shards_[g]->Reshard();
      });
      // Its reduction is queued: a gather queued after it may reuse the memory.
      pool_.PutOnStream(grads, &stream_);
    }
    w.end = Timed([&] { return s != nullptr ? s->EndStep() : stream_.Synchronize(); });
    if (prefetch) waits_.push_back(w);
    return Ms(Clock::now() - t0);
  }

  // Where the fsdp step waited for communication (ms, rank 0's clock):
  // forward gathers, backward gathers (and enqueueing reductions), the
  // reductions still running when the backward ended.
  struct Waits {
    double forward = 0, backward = 0, end = 0;
    double compute = 0;  // the simulated compute as this thread lived it (sleeps wake late when the cores are busy)
    // Device clock: time the device sat idle waiting for a gather, and how
    // late this thread woke after the device's compute ended, in total.
    double idle_forward = 0, idle_backward = 0, late = 0;
  };
  std::vector<Waits> waits_;

  double Ddp() {
    Align();
    const auto t0 = Clock::now();
    const int n = static_cast<int>(groups_.size());
    device_ = t0;
    double idle = 0, late = 0;  // no gathers: the device never waits
    for (int g = 0; g < n; ++g) Ok(Compute(g, 1.0 / 3, t0, &idle, &late));
    for (int g = n - 1; g >= 0; --g) {
      Ok(Compute(g, 2.0 / 3, t0, &idle, &late));
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
  template <typename F>
  double Timed(F f) {
    const auto t = Clock::now();
    Ok(f());
    return Ms(Clock::now() - t);
  }
  // Group g's share of the compute, whose inputs were ready at `ready`.
  // Device clock: it starts when the device is free and the inputs are
  // ready, and this thread sleeps until it ends; `idle` gains the time the
  // device waited for the inputs, `late` how late this thread woke.
  absl::Status Compute(int g, double share, Clock::time_point ready, double* idle, double* late) {
    if (compute_ms <= 0) return absl::OkStatus();
    const auto d = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(
        compute_ms * share * static_cast<double>(sizes_[g]) / static_cast<double>(total_)));
    if (!device_clock) {
      std::this_thread::sleep_for(d);
      return absl::OkStatus();
    }
    if (ready > device_) *idle += Ms(ready - device_);
    device_ = std::max(device_, ready) + d;
    std::this_thread::sleep_until(device_);
    *late += Ms(Clock::now() - device_);
    return absl::OkStatus();
  }
  void* Slot(int i) { return Check(ddp_->GradSlot(i)); }

  Communicator& comm_;
  std::vector<std::vector<Piece>> groups_;
  std::vector<size_t> sizes_;
  size_t total_ = 0;
  Clock::time_point device_;  // the simulated device is busy until then
  shard::BufferPool pool_;
  HostStream stream_;
  shard::ShardSchedule schedule_{&stream_, /*reshard_after_forward=*/true};
  std::vector<std::unique_ptr<shard::ShardGroup>> shards_;
  std::vector<std::vector<float>> adam_;
  std::unique_ptr<shard::Reducer> ddp_;
  std::vector<std::vector<int>> ddp_index_;
  int kept_ = 0;  // groups kept gathered from forward to backward
};

void Run(Communicator& comm, const std::vector<TensorSpec>& list, const Args& args) {
  const size_t max_group = args.split == "auto" ? LargestBlock(list) : std::strtoull(args.split.c_str(), nullptr, 10);
  Bench b(comm, list, max_group, args.keep_root);
  b.device_clock = args.device_clock;
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
  std::printf("# weft-shard-bench: %s, %zu parameters in %zu groups (split above %zu elements; %d kept gathered "
              "from forward to backward), %d ranks (%s), %d iterations (medians, ms)\n", args.list.c_str(),
              b.total(), b.num_groups(), max_group, b.kept(), comm.size(), Name(comm.backend()), args.iters);
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
  if (compute > 0) {
    std::vector<double> wf, wb, we, wc, idf, idb, late;
    for (size_t i = b.waits_.size() - f1.size(); i < b.waits_.size(); ++i) {
      const Bench::Waits& w = b.waits_[i];
      wf.push_back(w.forward), wb.push_back(w.backward), we.push_back(w.end), wc.push_back(w.compute);
      idf.push_back(w.idle_forward), idb.push_back(w.idle_backward), late.push_back(w.late);
    }
    std::printf("# fsdp with compute (medians, ms): compute as this thread lived it %.1f (asked %.1f); it waited "
                "for communication: forward gathers %.1f, backward gathers %.1f, reductions after the backward "
                "%.1f\n", Median(wc), compute, Median(wf), Median(wb), Median(we));
    if (args.device_clock) {
      std::printf("# fsdp device clock (medians, ms): device idle waiting for gathers: forward %.1f, backward "
                  "%.1f; this thread woke late after the device's compute by %.1f in all\n", Median(idf),
                  Median(idb), Median(late));
    }
  }
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
    else if (k == "--backend") a.backend = v;
    else if (k == "--ranks") a.ranks = std::atoi(v.c_str());
    else if (k == "--iters") a.iters = std::atoi(v.c_str());
    else if (k == "--warmup") a.warmup = std::atoi(v.c_str());
    else if (k == "--compute") a.compute = v;
    else if (k == "--split") a.split = v;
    else if (k == "--device-clock" && (v == "on" || v == "off")) a.device_clock = v == "on";
    else if (k == "--root" && (v == "keep" || v == "reshard")) a.keep_root = v == "keep";
    else {
      std::fprintf(stderr,
                   "usage: %s [--list NAME|PATH] [--ranks N] [--backend mpi|ucx] [--iters N] [--warmup N] [--compute MS|auto] "
                   "[--split N|auto] [--device-clock on|off] [--root keep|reshard]\n", argv[0]);
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
  const Backend backend = bench::Check(bench::LaunchedBackend(args.backend));
  bench::Ok(bench::RunOnWorld(args.ranks, 300000, [&](Communicator& comm) { bench::Run(comm, list, args); }, backend));
  return 0;
}
