// weft-reducer-bench: the DDP reducer against its two baselines, same run.
//
//   mpirun -np 2 --oversubscribe build/bench/reducer/weft-reducer-bench --list resnet50
//   build/bench/reducer/weft-reducer-bench --list bert_base --ranks 2    # in-process ranks
//
// A step is one simulated backward over a real model's gradient list
// (bench/data/<list>.tensors, float32): gradients become ready in reverse
// registration order, and with --compute the step sleeps until each one's
// ready time (a GPU computing while the CPU waits), spread over the step in
// proportion to the gradients' sizes. Modes, interleaved per iteration:
//   flat        backward, then one all-reduce of a flat buffer holding every gradient
//   per-tensor  backward, then one all-reduce per gradient
//   reducer     MarkReady as each gradient is ready, Finalize; separate gradient buffers
//   view        the same with gradient-as-bucket-view (no copies)
// compute = C ms means the backward takes C ms; "auto" gives each mode a
// backward as long as its own communication alone, the case where perfect
// overlap gives a step of max(compute, comm) and none gives 2x. Baselines run
// on a host stream's thread like the reducer's work (--baselines-on caller:
// blocking on the calling thread).
// Reported per mode (medians over iterations, rank 0's clock, ranks aligned
// by a barrier before each step): step time, communication time (the
// reducer: its stream's busy time), exposed communication (step - compute);
// with compute also "backward", the slowest rank's time from the step's start
// to its last ready call: compute plus whatever its simulated backward
// overran (a thread not getting a core back after a sleep), which the ratio
// books as exposed communication.
// Beside the reducer's ratio with compute, "bound" is the best ratio any
// in-order reducer could reach on this list (ArrivalBound): the part of the
// exposed time that the model's shape puts there.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/kernels/tensor_list.h"
#include "bench/world.h"
#include "comm/inproc/comm.h"
#include "comm/registry.h"
#include "core/status.h"
#include "core/stream.h"
#include "shard/reducer.h"

namespace weft {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string list = "resnet50";
  std::string backend = "mpi";  // under mpirun/srun: mpi or ucx
  int ranks = 2;  // in-process ranks when not launched by mpirun
  int iters = 10;
  int warmup = 2;
  std::string compute = "0";  // ms, or "auto"
  size_t bucket_mb = 25;
  size_t segment_kb = 2048;
  bool baselines_on_caller = false;  // default: baselines run on a host stream, as the reducer's work does
  bool merge = true;                 // ReducerOptions::merge_ready_segments
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Sample {
  std::vector<double> step, comm;
  std::vector<double> backward;  // t0 to the last gradient's ready call: compute plus any overrun
  std::vector<double> calls;     // reducer: collectives per step (segments launched, less those merged)
};

// The best step / max(compute, comm) of an in-order reducer on the simulated
// backward, with compute = comm: its work (comm in all, spread over the
// buckets' bytes) on a segment can start only when the segment's gradients
// are ready and after the segment before it. Above 1.0 is what the list's
// shape forces: the stream idles while the first gradients to be ready (the
// last layers) are computed, and what is ready last is reduced after
// backward (BERT's and GPT-2's embeddings, registered first).
double ArrivalBound(const std::vector<TensorSpec>& list, size_t bucket_bytes, size_t segment_bytes) {
  std::vector<shard::GradSpec> specs;
  for (const auto& t : list) specs.push_back({t.count, DataType::kFloat32, MemKind::kHost, t.name});
  shard::PlanOptions po;
  po.bucket_cap_bytes = bucket_bytes;
  absl::StatusOr<shard::BucketPlan> plan = shard::PlanBuckets(specs, po);
  if (!plan.ok()) return 0;
  // Ready time of each gradient, as a fraction of the backward (Bench::Backward).
  std::vector<double> ready(list.size());
  double total = 0, done = 0, work = 0;
  for (const auto& t : list) total += static_cast<double>(t.count);
  for (int i = static_cast<int>(list.size()) - 1; i >= 0; --i) {
    done += static_cast<double>(list[i].count);
    ready[i] = done / total;
  }
  for (const auto& b : plan->buckets) work += static_cast<double>(b.length);
  const size_t seg = std::max<size_t>(segment_bytes / sizeof(float), 1);
  double t = 0;
  for (const auto& b : plan->buckets) {
    for (size_t s0 = 0; s0 < b.length; s0 += seg) {
      const size_t s1 = std::min(b.length, s0 + seg);
      double need = 0;
      for (size_t k = 0; k < b.grads.size(); ++k) {
        const size_t lo = b.offsets[k], hi = lo + list[b.grads[k]].count;
        if (lo < s1 && hi > s0) need = std::max(need, ready[b.grads[k]]);
      }
      t = std::max(t, need) + static_cast<double>(s1 - s0) / work;
    }
  }
  return t;
}

class Bench {
 public:
  Bench(Communicator& comm, const std::vector<TensorSpec>& list, const Args& args)
      : comm_(comm), list_(list), args_(args) {
    size_t total = 0;
    for (const auto& t : list_) offsets_.push_back(total), total += t.count;
    flat_.resize(total);
    for (size_t i = 0; i < total; ++i) flat_[i] = static_cast<float>(static_cast<int>((i * 7 + comm.rank()) % 9) - 4);
    for (const auto& t : list_) own_.emplace_back(t.count, 1.0f);
    std::vector<shard::GradSpec> specs;
    for (const auto& t : list_) specs.push_back({t.count, DataType::kFloat32, MemKind::kHost, t.name});
    shard::ReducerOptions o;
    o.bucket_cap_bytes = args.bucket_mb << 20;
    o.segment_bytes = args.segment_kb << 10;
    o.merge_ready_segments = args.merge;
    o.rebuild_buckets = false;  // the ready order is fixed: reverse registration
    sep_ = Check(shard::Reducer::Create(&comm, specs, o));
    o.gradient_as_bucket_view = true;
    view_ = Check(shard::Reducer::Create(&comm, specs, o));
    total_count_ = total;
  }

  size_t bytes() const { return total_count_ * sizeof(float); }
  double compute_ms = 0;

  // The simulated backward: calls ready(i) for i = n-1..0 at its ready time.
  template <typename F>
  void Backward(Clock::time_point t0, F&& ready) {
    size_t done = 0;
    for (int i = static_cast<int>(list_.size()) - 1; i >= 0; --i) {
      done += list_[i].count;
      if (compute_ms > 0) {
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(
                                                compute_ms * static_cast<double>(done) / total_count_)));
      }
      ready(i);
    }
  }

  void Flat(Sample& s) {
    Align();
    const auto t0 = Clock::now();
    Backward(t0, [](int) {});
    const auto t1 = Clock::now();
    Ok(comm_.AllReduce(flat_.data(), flat_.data(), flat_.size(), DataType::kFloat32, RedOp::kAvg, Where()));
    Ok(stream_.Synchronize());
    const auto t2 = Clock::now();
    s.step.push_back(Ms(t2 - t0));
    s.comm.push_back(Ms(t2 - t1));
    s.backward.push_back(Ms(t1 - t0));
  }

  void PerTensor(Sample& s) {
    Align();
    const auto t0 = Clock::now();
    Backward(t0, [](int) {});
    const auto t1 = Clock::now();
    for (size_t i = 0; i < list_.size(); ++i) {
      float* p = flat_.data() + offsets_[i];
      Ok(comm_.AllReduce(p, p, list_[i].count, DataType::kFloat32, RedOp::kAvg, Where()));
    }
    Ok(stream_.Synchronize());
    const auto t2 = Clock::now();
    s.step.push_back(Ms(t2 - t0));
    s.comm.push_back(Ms(t2 - t1));
  }

  void Reduce(bool view, Sample& s) {
    shard::Reducer& r = view ? *view_ : *sep_;
    std::vector<void*> ptr(list_.size());
    for (size_t i = 0; i < list_.size(); ++i) ptr[i] = view ? Check(r.GradSlot(i)) : own_[i].data();
    r.ResetStats();
    Align();
    const auto t0 = Clock::now();
    Backward(t0, [&](int i) { Ok(r.MarkReady(i, ptr[i], nullptr)); });
    const auto t1 = Clock::now();
    Ok(r.Finalize(nullptr));
    s.step.push_back(Ms(Clock::now() - t0));
    const shard::ReducerStats st = r.stats();
    s.comm.push_back(st.comm_seconds * 1e3);
    s.backward.push_back(Ms(t1 - t0));
    s.calls.push_back(static_cast<double>(st.segments_launched - st.segments_merged));
  }

 private:
  void Align() { Ok(comm_.Barrier()); }
  // Where the baselines' all-reduces run: on a host stream's thread (as the
  // reducer's do), or blocking on the calling thread.
  void* Where() { return args_.baselines_on_caller ? nullptr : &stream_; }
  static void Ok(const absl::Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "weft-reducer-bench: %s\n", std::string(s.message()).c_str());
      std::exit(1);
    }
  }
  template <typename T>
  static T Check(absl::StatusOr<T> v) {
    Ok(v.status());
    return std::move(v).value();
  }

  Communicator& comm_;
  const std::vector<TensorSpec>& list_;
  const Args& args_;
  std::vector<size_t> offsets_;
  std::vector<float> flat_;
  std::vector<std::vector<float>> own_;
  std::unique_ptr<shard::Reducer> sep_, view_;
  size_t total_count_ = 0;
  HostStream stream_;
};

void Run(Communicator& comm, const std::vector<TensorSpec>& list, const Args& args) {
  Bench b(comm, list, args);
  const bool root = comm.rank() == 0;
  // Without compute first: these medians are also each mode's "comm alone".
  Sample flat, per, sep, view;
  for (int it = 0; it < args.warmup + args.iters; ++it) {
    Sample scratch;  // warm-up samples land here
    const bool keep = it >= args.warmup;
    b.Flat(keep ? flat : scratch);
    b.PerTensor(keep ? per : scratch);
    b.Reduce(false, keep ? sep : scratch);
    b.Reduce(true, keep ? view : scratch);
  }
  const double flat_ms = Median(flat.step), per_ms = Median(per.step);
  const double best = std::min(flat_ms, per_ms);
  if (root) {
    std::printf("# weft-reducer-bench: %s (%zu tensors, %.1f MiB float32), %d ranks, backend %s, bucket %zu MiB, "
                "segment %zu KiB, baselines on the %s thread, %d iterations (medians, ms)\n", args.list.c_str(),
                list.size(), b.bytes() / 1048576.0, comm.size(), Name(comm.backend()), args.bucket_mb, args.segment_kb,
                args.baselines_on_caller ? "calling" : "host stream's", args.iters);
    std::printf("%-34s %9s %9s %9s %s\n", "mode (compute 0)", "step", "comm", "exposed", "step / best baseline");
    std::printf("%-34s %9.2f %9.2f %9.2f %.2f\n", "flat all-reduce after backward", flat_ms, Median(flat.comm),
                flat_ms, flat_ms / best);
    std::printf("%-34s %9.2f %9.2f %9.2f %.2f\n", "per-tensor all-reduce loop", per_ms, Median(per.comm), per_ms,
                per_ms / best);
    std::printf("%-34s %9.2f %9.2f %9.2f %.2f  (target <= 1.5)  calls %.0f\n", "reducer, separate buffers",
                Median(sep.step), Median(sep.comm), Median(sep.step), Median(sep.step) / best, Median(sep.calls));
    std::printf("%-34s %9.2f %9.2f %9.2f %.2f  (target <= 1.0)  calls %.0f\n", "reducer, gradient as bucket view",
                Median(view.step), Median(view.comm), Median(view.step), Median(view.step) / best, Median(view.calls));
  }

  // With compute. "auto": each mode's backward takes as long as that mode's
  // own communication took without compute (its step above), the case where
  // perfect overlap gives max(compute, comm) = comm and none gives 2x.
  // Every rank uses rank 0's figures so the simulated backwards match.
  const bool autoc = args.compute == "auto";
  const double fixed = autoc ? 0 : std::atof(args.compute.c_str());
  if (!autoc && fixed <= 0) return;
  double c[3] = {autoc ? flat_ms : fixed, autoc ? Median(sep.step) : fixed, autoc ? Median(view.step) : fixed};
  const double comm_alone[3] = {flat_ms, Median(sep.step), Median(view.step)};
  if (!comm.Broadcast(c, c, 3, DataType::kFloat64, 0, nullptr).ok()) return;
  Sample cflat, csep, cview;
  for (int it = 0; it < args.warmup + args.iters; ++it) {
    Sample scratch;
    const bool keep = it >= args.warmup;
    b.compute_ms = c[0];
    b.Flat(keep ? cflat : scratch);
    b.compute_ms = c[1];
    b.Reduce(false, keep ? csep : scratch);
    b.compute_ms = c[2];
    b.Reduce(true, keep ? cview : scratch);
  }
  // The backward that matters is the slowest rank's: its last mark is when
  // the last bucket can start anywhere.
  for (Sample* m : {&cflat, &csep, &cview}) {
    if (!comm.AllReduce(m->backward.data(), m->backward.data(), m->backward.size(), DataType::kFloat64, RedOp::kMax,
                        nullptr).ok()) {
      return;
    }
  }
  if (root) {
    std::printf("%-34s %9s %9s %9s %9s %9s %s\n", autoc ? "mode (compute = its comm)" : "mode (compute fixed)",
                "compute", "backward", "step", "comm", "exposed", "step / max(compute, comm alone)");
    const double bound = ArrivalBound(list, args.bucket_mb << 20, args.segment_kb << 10);
    const char* names[3] = {"flat all-reduce after backward", "reducer, separate buffers",
                            "reducer, gradient as bucket view"};
    Sample* samples[3] = {&cflat, &csep, &cview};
    for (int m = 0; m < 3; ++m) {
      const double st = Median(samples[m]->step);
      std::printf("%-34s %9.2f %9.2f %9.2f %9.2f %9.2f %.2f%s", names[m], c[m], Median(samples[m]->backward), st,
                  Median(samples[m]->comm), st - c[m],
                  st / std::max(c[m], comm_alone[m]), m == 0 ? "  (no overlap: 2.0)" : "  (target <= 1.3)");
      if (m > 0 && autoc) std::printf("  bound %.2f", bound);
      if (m > 0) std::printf("  calls %.0f", Median(samples[m]->calls));
      std::printf("\n");
    }
  }
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
    else if (k == "--bucket-mb") a.bucket_mb = std::strtoul(v.c_str(), nullptr, 10);
    else if (k == "--segment-kb") a.segment_kb = std::strtoul(v.c_str(), nullptr, 10);
    else if (k == "--baselines-on") a.baselines_on_caller = v == "caller";
    else if (k == "--merge") a.merge = v != "0";
    else {
      std::fprintf(stderr, "usage: %s [--list resnet50|bert_base|gpt2_small|PATH] [--ranks N] [--backend mpi|ucx] [--iters N] "
                   "[--warmup N] [--compute MS|auto] [--bucket-mb N] [--segment-kb N] [--baselines-on stream|caller] [--merge 1|0]\n", argv[0]);
      std::exit(2);
    }
  }
  return a;
}

}  // namespace
}  // namespace bench
}  // namespace weft

int main(int argc, char** argv) {
  using namespace weft;
  const bench::Args args = bench::Parse(argc, argv);
  auto list = bench::ReadTensorList(bench::TensorListPath(args.list));
  if (!list.ok()) {
    std::fprintf(stderr, "weft-reducer-bench: %s\n", std::string(list.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<Backend> backend = bench::LaunchedBackend(args.backend);
  const absl::Status s = !backend.ok() ? backend.status() : bench::RunOnWorld(args.ranks, 120000, [&](Communicator& comm) {
    bench::Run(comm, *list, args);
  }, *backend);
  if (!s.ok()) {
    std::fprintf(stderr, "weft-reducer-bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
