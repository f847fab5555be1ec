// The reducer's calls: creation (with the cross-rank check), marks, Finalize
// and sync. Every call checks everything before changing anything, so a
// refused call leaves the backward exactly where it was.
#include "shard/reducer.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/memory.h"
#include "core/status.h"
#include "core/stream.h"
#include "core/trace.h"
#include "shard/plan_check.h"
#include "shard/reducer_state.h"
#include "shard/staging.h"

namespace weft {
namespace shard {

PlanOptions PlanOptionsFor(const ReducerOptions& o) {
  PlanOptions po;
  po.bucket_cap_bytes = o.bucket_cap_bytes;
  po.first_bucket_cap_bytes = o.first_bucket_cap_bytes;
  po.comm_dtype = o.comm_dtype;
  return po;
}

namespace {

absl::Status CheckOptions(const ReducerOptions& o) {
  if (o.bucket_cap_bytes == 0) return InvalidArgument("bucket_cap_bytes = 0 (expected at least 1)");
  if (o.first_bucket_cap_bytes == 0) return InvalidArgument("first_bucket_cap_bytes = 0 (expected at least 1)");
  if (o.segment_bytes == 0) return InvalidArgument("segment_bytes = 0 (expected at least 1)");
  if (o.comm_dtype && *o.comm_dtype != DataType::kFloat16 && *o.comm_dtype != DataType::kBfloat16) {
    return InvalidArgument("comm_dtype = %d: compression is to float16 (%d) or bfloat16 (%d)",
                           static_cast<int>(*o.comm_dtype), static_cast<int>(DataType::kFloat16),
                           static_cast<int>(DataType::kBfloat16));
  }
  if (o.comm_dtype && o.gradient_as_bucket_view) {
    return InvalidArgument("gradient_as_bucket_view needs the gradients' own comm dtype: a %s bucket cannot be "
                           "a view of float32 gradients", Name(*o.comm_dtype));
  }
  return absl::OkStatus();
}

// A CUDA reducer records and waits for events on the caller's stream: a weft
// host stream there would reach the CUDA runtime as a bogus cudaStream_t.
absl::Status CheckCudaStream(void* stream) {
  if (HostStream::Find(stream) == nullptr) return absl::OkStatus();
  return InvalidArgument("stream = %p is a weft host stream, but the reducer's communicator works on CUDA memory: "
                         "pass a cudaStream_t, or NULL for the legacy default stream", stream);
}

}  // namespace

Reducer::Reducer(Communicator* comm, std::vector<GradSpec> grads, const ReducerOptions& options,
                 std::unique_ptr<DeviceSide> dev)
    : comm_(comm), direct_(FindDirectReduce(*comm)), grads_(std::move(grads)), options_(options), dev_(std::move(dev)),
      stats_(std::make_shared<StatsBox>()) {
  if (!dev_) stream_.emplace();
  const size_t n = grads_.size();
  ptr_.assign(n, nullptr);
  marks_.assign(n, 0);
  expected_.assign(n, 1);
  used_.assign(n, 0);
  unused_.assign(n, 0);
  used_anywhere_.assign(n, 1);
  saved_.resize(n);
}

Reducer::~Reducer() {
  if (!dev_) {
    (void)stream_->Synchronize();
    return;
  }
  // Device memory goes back on the comm stream, which DeviceSide's
  // destructor then waits for: nothing else on the host is waited for. In
  // view mode the buckets are the framework's gradients, and work it queued
  // on its stream before Destroy (an optimizer step) may still read them:
  // their frees wait for that stream's last known point, as a rebuild's do.
  DeviceScope on(dev_->rt(), dev_->device());
  if (options_.gradient_as_bucket_view) (void)dev_->After(last_stream_);
  saved_.clear();
  buckets_.clear();
  dev_.reset();
}

absl::StatusOr<std::unique_ptr<Reducer>> Reducer::Create(Communicator* comm, std::vector<GradSpec> grads,
                                                         const ReducerOptions& options) {
  if (comm == nullptr) return InvalidArgument("comm is NULL");
  // CUDA: every rank fails here alike when the build or the machine has no
  // CUDA, before the plan check (which itself needs the device).
  std::unique_ptr<DeviceSide> dev;
  std::optional<DeviceScope> on;
  if (comm->memory() == MemKind::kCuda) {
    ASSIGN_OR_RETURN(const DeviceRuntime* rt, RequireDeviceRuntime("the reducer"));
    absl::StatusOr<int> count = rt->DeviceCount();
    if (!count.ok()) return Annotate(count.status(), "the reducer on a CUDA communicator");
    int device = comm->options().cuda_device;
    if (device < 0) {
      absl::StatusOr<int> current = rt->CurrentDevice();
      if (!current.ok()) return Annotate(current.status(), "the reducer's CUDA device (the current one)");
      device = *current;
    }
    if (device >= *count) {
      return InvalidArgument("the communicator's cuda_device = %d, but this machine has %d CUDA device(s)", device,
                             *count);
    }
    ASSIGN_OR_RETURN(dev, DeviceSide::Create(device, static_cast<int>(grads.size())));
    on.emplace(rt, device);
    RETURN_IF_ERROR(on->status());
  }
  absl::Status local = CheckOptions(options);
  for (size_t i = 0; local.ok() && i < grads.size(); ++i) {
    grads[i].memory = comm->memory();
    if (!IsValid(grads[i].dtype)) {
      local = InvalidArgument("grads[%zu] (%s): dtype = %d is not a weftDataType_t", i, GradLabel(grads, i),
                              static_cast<int>(grads[i].dtype));
    } else if (!IsFloating(grads[i].dtype)) {
      // Said here, not at the first Finalize: the buckets' copy and scaling
      // plans are floating point, and an integer has no gradient to average.
      local = InvalidArgument("grads[%zu] (%s): dtype = %s; gradients are float32, float64, float16 or bfloat16",
                              i, GradLabel(grads, i), Name(grads[i].dtype));
    }
  }
  const int64_t words[] = {static_cast<int64_t>(options.bucket_cap_bytes),
                           static_cast<int64_t>(options.first_bucket_cap_bytes),
                           options.comm_dtype ? static_cast<int64_t>(*options.comm_dtype) : -1,
                           options.find_unused | options.static_graph << 1 | options.rebuild_buckets << 2 |
                               options.gradient_as_bucket_view << 3 | options.reduce_in_pieces << 4 |
                               options.merge_ready_segments << 5,
                           static_cast<int64_t>(options.segment_bytes),
                           static_cast<int64_t>(options.min_piece_bytes)};
  const char* const names[] = {"bucket_cap_bytes", "first_bucket_cap_bytes", "comm_dtype",
                               "the flags (find_unused | static_graph << 1 | rebuild_buckets << 2 | "
                               "gradient_as_bucket_view << 3 | reduce_in_pieces << 4 | merge_ready_segments << 5)",
                               "segment_bytes", "min_piece_bytes"};
  RETURN_IF_ERROR(CheckSamePlanInputs(*comm, grads, words, names, local));
  std::unique_ptr<Reducer> r(new Reducer(comm, std::move(grads), options, std::move(dev)));
  std::lock_guard<std::mutex> lock(r->mu_);
  RETURN_IF_ERROR(r->Layout(PlanOptionsFor(options)));
  r->ResetIteration();
  // The zero-filled buckets are ready for any stream (view mode hands out
  // slots): the one host wait of a CUDA reducer's creation.
  if (r->dev_) RETURN_IF_ERROR(r->dev_->Synchronize());
  return r;
}

// A gradient inside a bucket but not at its own slot would be read and
// written as another gradient's. (Gradients overlapping each other are
// caught per segment, where it matters most, when its copies or pieces are
// made: shard/reducer_buckets.cc.) A few comparisons: there are few buckets.
absl::Status Reducer::CheckMemory(int index, const void* grad) const {
  const GradSpec& spec = grads_[index];
  const uintptr_t b = reinterpret_cast<uintptr_t>(grad), e = b + spec.count * ElementSize(spec.dtype);
  if (b == e || grad == SlotPtr(index)) return absl::OkStatus();
  for (const auto& bs : buckets_) {
    const auto lo = reinterpret_cast<uintptr_t>(bs->buf->data);
    if (b < lo + bs->buf->bytes && lo < e) {
      return InvalidArgument("grad = %p of gradient %s lies in the reducer's bucket memory but is not its own slot "
                             "(GradSlot(%d) = %p)", grad, GradLabel(grads_, index), index, SlotPtr(index));
    }
  }
  return absl::OkStatus();
}

absl::Status Reducer::CheckIndex(int index) const {
  if (index < 0 || index >= num_grads()) {
    return InvalidArgument("index = %d is not a registered gradient (expected 0..%d)", index, num_grads() - 1);
  }
  return absl::OkStatus();
}

std::string Reducer::Labels(const std::vector<int>& grads) const {
  constexpr size_t kShown = 10;
  std::vector<std::string> parts;
  for (size_t i = 0; i < grads.size() && i < kShown; ++i) parts.push_back(GradLabel(grads_, grads[i]));
  std::string s = absl::StrJoin(parts, ", ");
  if (grads.size() > kShown) absl::StrAppendFormat(&s, " and %zu more", grads.size() - kShown);
  return s;
}

void Reducer::ResetIteration() {
  std::fill(ptr_.begin(), ptr_.end(), nullptr);
  std::fill(marks_.begin(), marks_.end(), 0);
  std::fill(used_.begin(), used_.end(), 0);
  std::fill(unused_.begin(), unused_.end(), 0);
  ready_order_.clear();
  next_bucket_ = 0;
  next_segment_ = 0;
  active_ = false;
  launch_error_ = absl::OkStatus();
  for (auto& b : buckets_) b->seg_pending = b->seg_grads;
  // No call is pending (Finalize drained the stream).
  for (auto& b : buckets_) {
    if (b->fill != nullptr && buckets_[b->fill->first] == b) b->fill->Reset();
  }
}

absl::Status Reducer::MarkReady(int index, void* grad, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckIndex(index));
  const GradSpec& spec = grads_[index];
  if (stream != nullptr && !dev_) {
    return InvalidArgument("stream = %p: for host memory pass NULL (the reducer overlaps on its own stream)",
                           stream);
  }
  if (dev_) RETURN_IF_ERROR(CheckCudaStream(stream));
  if (grad == nullptr && spec.count > 0) {
    return InvalidArgument("grad is NULL for gradient %s of %zu elements", GradLabel(grads_, index), spec.count);
  }
  // A communicator told its buffers' kind (weftConfig_t.trust_memory): no pointer classified on this hot path.
  if (!comm_->options().trust_memory && !Compatible(ClassifyPointer(grad), spec.memory)) {
    return InvalidArgument("grad = %p of gradient %s is %s memory; the reducer's communicator works on %s memory",
                           grad, GradLabel(grads_, index), Name(ClassifyPointer(grad)), Name(spec.memory));
  }
  if (!sync_) return absl::OkStatus();  // no_sync: the framework accumulates
  if (unused_[index]) {
    return InvalidUsage("gradient %s was marked unused in this backward and cannot also be marked ready",
                        GradLabel(grads_, index));
  }
  const bool learning = options_.static_graph && iterations_ == 0;
  if (!learning && marks_[index] >= expected_[index]) {
    if (options_.static_graph) {
      return InvalidUsage("gradient %s was marked ready %d times in this backward, more than the %d marks the "
                          "first backward made (static_graph expects the same graph every time)",
                          GradLabel(grads_, index), marks_[index] + 1, expected_[index]);
    }
    return InvalidUsage("gradient %s was marked ready twice in one backward: with activation checkpointing a "
                        "gradient is produced once per recomputation; create the reducer with static_graph to "
                        "count the marks", GradLabel(grads_, index));
  }
  RETURN_IF_ERROR(CheckMemory(index, grad));
  std::optional<DeviceScope> on;  // CUDA: for the event and any launch below
  RETURN_IF_ERROR(EnterDevice(on));
  if (dev_) {
    RETURN_IF_ERROR(dev_->Produced(index, stream));  // before any change: a failure refuses the call
    last_stream_ = stream;
  }
  ptr_[index] = grad;
  ++marks_[index];
  active_ = true;
  if (trace::Sink* sink = comm_->trace()) {
    sink->Instant("mark_ready", "reducer", absl::StrFormat("\"grad\":%d,\"bucket\":%d,\"mark\":%d", index,
                                                           plan_.bucket_of[index], marks_[index]));
  }
  if (learning) {
    if (marks_[index] == 1) ready_order_.push_back(index);
    return absl::OkStatus();  // launched at Finalize, once the mark counts are known
  }
  if (marks_[index] == expected_[index]) {
    used_[index] = 1;
    ready_order_.push_back(index);
    SlotIn(index);
  }
  return absl::OkStatus();
}

absl::Status Reducer::MarkUnused(int index) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckIndex(index));
  if (!sync_) return absl::OkStatus();
  if (marks_[index] > 0) {
    return InvalidUsage("gradient %s was already marked ready in this backward and cannot be marked unused",
                        GradLabel(grads_, index));
  }
  if (unused_[index]) {
    return InvalidUsage("gradient %s was marked unused twice in one backward", GradLabel(grads_, index));
  }
  std::optional<DeviceScope> on;
  RETURN_IF_ERROR(EnterDevice(on));
  ZeroSlot(index);
  unused_[index] = 1;
  active_ = true;
  ready_order_.push_back(index);
  if (!(options_.static_graph && iterations_ == 0)) SlotIn(index);
  return absl::OkStatus();
}

absl::Status Reducer::Finalize(void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stream != nullptr && !dev_) {
    return InvalidArgument("stream = %p: for host memory pass NULL (Finalize blocks)", stream);
  }
  if (dev_) RETURN_IF_ERROR(CheckCudaStream(stream));
  if (!sync_) return absl::OkStatus();
  const bool learning = options_.static_graph && iterations_ == 0;
  std::vector<int> missing, partial;
  for (int g = 0; g < num_grads(); ++g) {
    if (unused_[g]) continue;
    if (marks_[g] == 0) missing.push_back(g);
    else if (!learning && marks_[g] < expected_[g]) partial.push_back(g);
  }
  if (!partial.empty()) {
    return InvalidUsage("%zu gradients got fewer marks than the first backward made (static_graph): %s",
                        partial.size(), Labels(partial));
  }
  if (!missing.empty() && !options_.find_unused) {
    return InvalidUsage("%zu of %d gradients were never marked ready in this backward: %s (mark them ready or "
                        "unused, or create the reducer with find_unused)",
                        missing.size(), num_grads(), Labels(missing));
  }

  std::optional<DeviceScope> on;
  RETURN_IF_ERROR(EnterDevice(on));
  trace::Span span(comm_->trace(), "finalize", "reducer");
  if (dev_) last_stream_ = stream;
  if (learning) {
    for (int g = 0; g < num_grads(); ++g) expected_[g] = std::max(1, marks_[g]);
    for (int g : std::vector<int>(ready_order_)) {
      if (!unused_[g]) used_[g] = 1;
      SlotIn(g);
    }
  }
  for (int g : missing) {  // find-unused: a gradient nobody marked took no part
    ZeroSlot(g);
    unused_[g] = 1;
    ready_order_.push_back(g);
    SlotIn(g);
  }
  absl::Status st = launch_error_;
  if (!dev_) {
    const absl::Status synced = stream_->Synchronize();
    if (st.ok()) st = synced;
    int64_t merged = 0;  // read now: a rebuild below replaces the buckets
    for (auto& b : buckets_) {  // each ReadyFill once (consecutive buckets may share one)
      if (b->fill != nullptr && buckets_[b->fill->first] == b) merged += static_cast<int64_t>(b->fill->buf->merged());
    }
    std::lock_guard<std::mutex> lock(stats_->mu);
    stats_->value.segments_merged += merged;
  } else if (st.ok()) {
    st = comm_->async_error();  // NCCL's, polled by its watchdog
  }
  // The collectives below run on every rank whatever went wrong on this one
  // (a refused copy plan, gradients sharing memory), so that every rank
  // issues the same calls in the same backward; a broken communicator fails
  // them at once. Skipping them on the rank with the error would leave its
  // peers in a different call, or rebuilding buckets a backward apart.
  // Every gradient marked here is used; the bitmap tells which of the others
  // some rank used (GradUsed). CUDA: after the buckets on the comm stream,
  // and the host waits for it.
  if (options_.find_unused) {
    const absl::Status used =
        StagedAllReduce(*comm_, used_.data(), used_.size(), DataType::kUint8, RedOp::kMax, CommStream());
    if (used.ok()) {
      RestoreUnusedEverywhere();
      used_anywhere_ = used_;
    }
    if (st.ok()) st = used;
  }
  ++iterations_;
  if (options_.rebuild_buckets && !rebuilt_) {
    const absl::Status rebuilt = Rebuild();
    if (st.ok()) st = rebuilt;
  }
  if (st.ok()) st = launch_error_;  // the restores and the rebuild's copies
  // CUDA: the caller's stream continues after the copy-outs (and any
  // rebuild), even after an error, so it never reads a half-written bucket.
  if (dev_) {
    const absl::Status handed = dev_->Handoff(stream);
    if (st.ok()) st = handed;
  }
  ResetIteration();
  return st;
}

absl::Status Reducer::SetSync(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_ && sync != sync_) {
    return InvalidUsage("SetSync(%d) in the middle of a backward (%zu gradients in so far): call it before the "
                        "backward starts or after Finalize", sync ? 1 : 0, ready_order_.size());
  }
  sync_ = sync;
  return absl::OkStatus();
}

int Reducer::num_buckets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(buckets_.size());
}

absl::StatusOr<DataType> Reducer::bucket_dtype(int b) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (b < 0 || b >= static_cast<int>(buckets_.size())) {
    return InvalidArgument("bucket = %d is outside [0, %zu) (the reducer's buckets)", b, buckets_.size());
  }
  return buckets_[static_cast<size_t>(b)]->layout.dtype;
}

absl::StatusOr<void*> Reducer::GradSlot(int index) const {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckIndex(index));
  return SlotPtr(index);
}

absl::StatusOr<int> Reducer::GradBucket(int index) const {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckIndex(index));
  return plan_.bucket_of[index];
}

absl::StatusOr<bool> Reducer::GradUsed(int index) const {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(CheckIndex(index));
  if (!options_.find_unused) {
    return InvalidUsage("GetGradUsed: the reducer was created without find_unused, so it does not track which "
                        "gradients were used");
  }
  return used_anywhere_[index] != 0;
}

int Reducer::layout_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return layout_version_;
}

ReducerStats Reducer::stats() const {
  std::lock_guard<std::mutex> lock(stats_->mu);
  return stats_->value;
}

void Reducer::ResetStats() {
  std::lock_guard<std::mutex> lock(stats_->mu);
  stats_->value = ReducerStats{};
}

}  // namespace shard
}  // namespace weft
