#include "bench/runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/check.h"
#include "bench/types.h"
#include "core/status.h"

namespace weft_bench {
namespace {

unsigned char* Allocate(size_t bytes) {
  constexpr size_t kAlign = 4096;
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  // Touch every page now, so that first-touch faults are never timed.
  if (p != nullptr) std::memset(p, 0, rounded == 0 ? kAlign : rounded);
  return static_cast<unsigned char*>(p);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Runner>> Runner::Create(const Options& options, const World& world) {
  std::unique_ptr<Runner> r(new Runner(options, world));
  r->capacity_ = options.max_bytes;
  r->send_ = Allocate(r->capacity_);
  r->recv_ = Allocate(r->capacity_);
  if (options.check > 0) r->expected_ = Allocate(r->capacity_);
  if (r->send_ == nullptr || r->recv_ == nullptr || (options.check > 0 && r->expected_ == nullptr)) {
    return weft::SystemError("rank %d: cannot allocate %s buffers of %zu bytes (-e)", world.rank,
                             options.check > 0 ? "three" : "two", r->capacity_);
  }
  return r;
}

Runner::~Runner() {
  std::free(send_);
  std::free(recv_);
  std::free(expected_);
}

absl::Status Runner::Launch(Mode m, const Layout& l, weftDataType_t t, weftRedOp_t op, int iter) {
  const size_t es = TypeSize(t);
  const size_t total = l.bytes(es);
  const size_t steps = total == 0 ? 1 : capacity_ / total;
  const size_t shift = total * (static_cast<size_t>(iter) % steps);
  const void* send = nullptr;
  void* recv = nullptr;
  CallBuffers(l, m == Mode::kInPlace, w_.rank, es, send_ + shift, recv_ + shift, &send, &recv);
  if (m == Mode::kMpi) {
    RETURN_IF_ERROR(RunMpi(o_.collective, send, recv, l.count, t, op, o_.root));
  } else {
    RETURN_IF_ERROR(RunWeft(o_.collective, send, recv, l.count, t, op, o_.root, w_.comm,
                            o_.stream_null ? nullptr : w_.stream));
  }
  if (o_.blocking) {
    RETURN_IF_ERROR(Complete());
    RETURN_IF_ERROR(w_.harness->Barrier());
  }
  return absl::OkStatus();
}

// Per-rank times combined as -a says.
absl::StatusOr<double> Runner::Combine(double seconds) {
  Harness& h = *w_.harness;
  switch (o_.average) {
    case Average::kRank0: return h.Broadcast(seconds);
    case Average::kMean: {
      ASSIGN_OR_RETURN(const double sum, h.AllReduce(seconds, Harness::Reduce::kSum));
      return sum / w_.nranks;
    }
    case Average::kMin: return h.AllReduce(seconds, Harness::Reduce::kMin);
    case Average::kMax: return h.AllReduce(seconds, Harness::Reduce::kMax);
  }
  return seconds;
}

absl::Status Runner::Complete() {
  if (o_.stream_null || w_.stream == nullptr) return absl::OkStatus();
  return WeftStatus("weftStreamSynchronize", weftStreamSynchronize(w_.stream));
}

absl::StatusOr<double> Runner::Time(Mode m, const Layout& l, weftDataType_t t, weftRedOp_t op) {
  // One untimed pass over every buffer offset the timed loop will use (it
  // shifts buffers per iteration, as nccl-tests does). Without it the first
  // mode timed at a size pays for re-touching pages the earlier sizes left
  // alone, and the modes after it do not: on this project's VMs that costs
  // microseconds per page and decided which of weft and MPI looked faster.
  const size_t total = l.bytes(TypeSize(t));
  const int offsets = total == 0 ? 1 : static_cast<int>(std::min<size_t>(capacity_ / total, o_.iters));
  for (int i = 0; i < std::max(offsets, 1); ++i) RETURN_IF_ERROR(Launch(m, l, t, op, i));
  RETURN_IF_ERROR(Complete());
  RETURN_IF_ERROR(w_.harness->Barrier());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o_.iters; ++i) RETURN_IF_ERROR(Launch(m, l, t, op, i));
  RETURN_IF_ERROR(Complete());
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return Combine(elapsed.count() / o_.iters);
}

absl::StatusOr<long long> Runner::Check(Mode m, const Layout& l, weftDataType_t t, weftRedOp_t op) {
  for (int c = 0; c < o_.check; ++c) {
    unsigned char* got = nullptr;
    size_t count = 0;
    const Spec spec{t, Reduces(o_.collective) ? op : weftSum, w_.nranks, ++checks_};
    PrepareCheck(o_.collective, m == Mode::kInPlace, l, spec, w_.rank, o_.root, {send_, recv_, expected_}, &got,
                 &count);
    RETURN_IF_ERROR(Launch(m, l, t, op, 0));
    RETURN_IF_ERROR(Complete());
    const Mismatch mm = Compare(got, expected_, count, TypeSize(t));
    if (mm.wrong != 0) {
      std::fprintf(stderr,
                   "weft-bench: rank %d: %s %s %s %s count %zu: %zu of %zu elements wrong; first at %zu: got 0x%llx, "
                   "want 0x%llx\n",
                   w_.rank, CollectiveName(o_.collective), TypeName(t),
                   Reduces(o_.collective) ? OpName(op) : "-", m == Mode::kInPlace ? "in-place" : "out-of-place",
                   l.count, mm.wrong, count, mm.first, static_cast<unsigned long long>(mm.got),
                   static_cast<unsigned long long>(mm.want));
    }
    ASSIGN_OR_RETURN(const int64_t wrong, w_.harness->SumInt64(static_cast<int64_t>(mm.wrong)));
    if (wrong != 0) return static_cast<long long>(wrong);
  }
  return 0;
}

absl::Status Runner::Warmup(weftDataType_t t, weftRedOp_t op) {
  const size_t es = TypeSize(t);
  const bool mpi = o_.baseline_mpi && MpiCanRun(o_.collective, t);
  for (size_t size : {o_.max_bytes, o_.min_bytes}) {
    const Layout l = GetLayout(o_.collective, size / es, w_.nranks);
    for (int i = 0; i < o_.warmup_iters; ++i) RETURN_IF_ERROR(Launch(Mode::kOutOfPlace, l, t, op, i));
    RETURN_IF_ERROR(Complete());
    for (int i = 0; mpi && i < o_.warmup_iters; ++i) RETURN_IF_ERROR(Launch(Mode::kMpi, l, t, op, i));
  }
  return absl::OkStatus();
}

absl::StatusOr<Row> Runner::Run(size_t size, weftDataType_t t, weftRedOp_t op) {
  const size_t es = TypeSize(t);
  const Layout l = GetLayout(o_.collective, size / es, w_.nranks);
  Row row;
  row.bytes = l.bytes(es);
  row.count = l.count;
  row.type = t;
  row.op = op;
  for (Mode m : {Mode::kOutOfPlace, Mode::kInPlace}) {
    Measurement& r = m == Mode::kOutOfPlace ? row.out_of_place : row.in_place;
    if (m == Mode::kInPlace && !HasInPlace(o_.collective)) {
      r.ran = false;
      continue;
    }
    ASSIGN_OR_RETURN(r.seconds, Time(m, l, t, op));
    Bandwidth(o_.collective, l, es, w_.nranks, r.seconds, &r.algbw, &r.busbw);
    if (o_.check > 0) {
      ASSIGN_OR_RETURN(r.wrong, Check(m, l, t, op));
    }
  }
  if (o_.baseline_mpi && MpiCanRun(o_.collective, t)) {
    row.has_baseline = true;
    Measurement& b = row.baseline;
    ASSIGN_OR_RETURN(b.seconds, Time(Mode::kMpi, l, t, op));
    Bandwidth(o_.collective, l, es, w_.nranks, b.seconds, &b.algbw, &b.busbw);
  }
  return row;
}

}  // namespace weft_bench
