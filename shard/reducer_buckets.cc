// The reducer's bucket side: buffers, layout and rebuild, and the work each
// bucket enqueues on the comm stream (copy-in, all-reduce, copy-out): a
// HostStream for host memory, a CUDA stream for device memory
// (shard/reducer_device.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <new>

#include "core/status.h"
#include "core/trace.h"
#include "kernels/copy_plan.h"
#include "kernels/kernels.h"
#include "shard/reducer.h"
#include "shard/reducer_state.h"
#include "shard/staging.h"

namespace weft {
namespace shard {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<Reducer::Buffer>> Reducer::Buffer::Make(size_t n, DeviceSide* dev) {
  std::unique_ptr<Buffer> b(new Buffer());
  b->bytes = n;
  b->dev = dev;
  if (dev != nullptr) {
    ASSIGN_OR_RETURN(void* p, dev->Alloc(n));  // zero-filled on the comm stream
    b->data = static_cast<unsigned char*>(p);
    return b;
  }
  b->data = static_cast<unsigned char*>(::operator new(n == 0 ? 1 : n, std::align_val_t(kAlign)));
  std::memset(b->data, 0, n);  // alignment gaps and padding stay zero forever
  return b;
}

Reducer::Buffer::~Buffer() {
  if (dev != nullptr) {
    dev->Free(data);
  } else {
    ::operator delete(data, std::align_val_t(kAlign));
  }
}

absl::StatusOr<std::unique_ptr<Reducer::Buffer>> Reducer::NewBuffer(size_t bytes) {
  return Buffer::Make(bytes, dev_.get());
}

absl::Status Reducer::Zero(void* p, size_t bytes) {
  if (dev_) return dev_->Zero(p, bytes);
  std::memset(p, 0, bytes);
  return absl::OkStatus();
}

absl::Status Reducer::CopyBytes(void* dst, const void* src, size_t bytes) {
  if (dev_) return dev_->Copy(dst, src, bytes);
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

void Reducer::Note(const absl::Status& s) {
  if (!s.ok() && launch_error_.ok()) launch_error_ = s;
}

void* Reducer::CommStream() const { return dev_ ? dev_->stream() : nullptr; }

absl::Status Reducer::EnterDevice(std::optional<DeviceScope>& on) const {
  if (!dev_) return absl::OkStatus();
  on.emplace(dev_->rt(), dev_->device());
  return Annotate(on->status(), "the reducer's CUDA device");
}

void* Reducer::SlotPtr(int g) const {
  const int b = plan_.bucket_of[g];
  const Bucket& bk = buckets_[b]->layout;
  return buckets_[b]->buf->data + bk.offsets[plan_.slot_of[g]] * ElementSize(bk.dtype);
}

absl::Status Reducer::Layout(const PlanOptions& plan_options) {
  ASSIGN_OR_RETURN(BucketPlan plan, PlanBuckets(grads_, plan_options));
  SegmentCaps caps;  // the same on every rank (options and backend), so all issue the same calls
  caps.world_size = comm_->size();
  caps.device = dev_ != nullptr;
  caps.reduces_pieces = direct_ != nullptr && direct_->ReducesPieces();
  caps.agrees_ready_in_call = direct_ != nullptr && direct_->AgreesReadyInCall();
  caps.reduces_ready_parts = direct_ != nullptr && direct_->ReducesReadyParts();
  SegmentPlan segments = PlanSegments(plan, grads_, options_, caps);
  std::vector<std::unique_ptr<BucketState>> buckets;
  for (size_t b = 0; b < plan.buckets.size(); ++b) {
    auto bs = std::make_unique<BucketState>();
    static_cast<BucketSegments&>(*bs) = std::move(segments.buckets[b]);
    bs->layout = plan.buckets[b];
    ASSIGN_OR_RETURN(bs->buf, NewBuffer(bs->layout.bytes()));
    bs->copies.resize(bs->segments());
    buckets.push_back(std::move(bs));
  }
  // CUDA: the old buckets' plans may still be queued on the comm stream
  // (DeviceSide::Retire).
  for (auto& old : buckets_) {
    for (SegmentCopies& c : old->copies) RetireCopies(c);
  }
  // The old slots hold the last averages (a view's value, or the only copy
  // of a gradient unused here): carry them over into the new layout.
  if (!buckets_.empty()) {
    for (int g = 0; g < num_grads(); ++g) {
      const Bucket& nb = plan.buckets[plan.bucket_of[g]];
      void* dst = buckets[plan.bucket_of[g]]->buf->data + nb.offsets[plan.slot_of[g]] * ElementSize(nb.dtype);
      RETURN_IF_ERROR(CopyBytes(dst, SlotPtr(g), grads_[g].count * ElementSize(nb.dtype)));
    }
  }
  const bool relayout = !buckets_.empty();
  plan_ = std::move(plan);
  buckets_ = std::move(buckets);
  if (relayout) ++layout_version_;
  // Ready segments: one ReadyBuffer per chain, its buckets' memory as its
  // parts. Without compute between the gradients, a backward's calls are
  // then one or two per chain rather than one per segment, each a
  // synchronisation of every rank's thread.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    BucketState& bs = *buckets_[b];
    if (bs.ready_first != static_cast<int>(b)) continue;
    auto fill = std::make_shared<ReadyFill>();
    fill->first = bs.ready_first;
    std::vector<Piece> parts;
    for (size_t c = b; c < buckets_.size() && buckets_[c]->ready_first == bs.ready_first; ++c) {
      BucketState& part = *buckets_[c];
      part.fill = fill;
      parts.push_back(Piece{part.buf->data, part.buf->data, part.ready_elem0, part.layout.length});
      for (const Segment& seg : part.segs) fill->seg_end.push_back(part.ready_elem0 + seg.end);
    }
    fill->buf = std::make_shared<ReadyBuffer>(std::move(parts), bs.layout.dtype);
    fill->filled.assign(fill->seg_end.size(), 0);
  }
  return absl::OkStatus();
}

absl::Status Reducer::Rebuild() {
  rebuilt_ = true;
  const int n = num_grads();
  if (static_cast<int>(ready_order_.size()) != n || n == 0) return absl::OkStatus();
  std::vector<int32_t> order(ready_order_.begin(), ready_order_.end());
  RETURN_IF_ERROR(StagedBroadcast(*comm_, order.data(), n, DataType::kInt32, 0, CommStream()));
  PlanOptions po = PlanOptionsFor(options_);
  po.order.assign(order.begin(), order.end());
  ASSIGN_OR_RETURN(BucketPlan plan, PlanBuckets(grads_, po));
  bool same = plan.buckets.size() == plan_.buckets.size();
  for (size_t b = 0; same && b < plan.buckets.size(); ++b) {
    same = plan.buckets[b].grads == plan_.buckets[b].grads;
  }
  if (same) return absl::OkStatus();
  // CUDA: the old slots are copied and freed on the comm stream; work the
  // caller enqueued before Finalize may still read them (view mode).
  if (dev_) RETURN_IF_ERROR(dev_->After(last_stream_));
  return Layout(po);
}

// Where segments merge, every segment about to go that needs no copy is
// marked filled before the first of them is enqueued: a burst of ready
// segments then goes in the first one's call, whenever the stream runs it.
void Reducer::LaunchReady() {
  std::vector<std::pair<int, size_t>>& go = launching_;
  go.clear();
  while (next_bucket_ < static_cast<int>(buckets_.size())) {
    BucketState& bs = *buckets_[next_bucket_];
    if (next_segment_ == bs.segments()) {
      ++next_bucket_;
      next_segment_ = 0;
      continue;
    }
    if (bs.seg_pending[next_segment_] > 0) break;
    go.emplace_back(next_bucket_, next_segment_++);
  }
  for (const auto& [b, k] : go) {
    const BucketState& bs = *buckets_[b];
    if (bs.fill != nullptr && !FilledByCopy(b, k)) bs.fill->Filled(bs.ready_seg0 + k);
  }
  for (const auto& [b, k] : go) Launch(b, k);
}

bool Reducer::FilledByCopy(int b, size_t k) { return Copies(b, k).in.elements() > 0; }

void Reducer::SlotIn(int g) {
  BucketState& bs = *buckets_[plan_.bucket_of[g]];
  if (grads_[g].count > 0) {
    const size_t s = plan_.slot_of[g];
    for (size_t k = bs.slot_seg[s]; k < bs.slot_seg_end[s]; ++k) --bs.seg_pending[k];
  }
  LaunchReady();
}

// A bucket runs as segments of at most options_.segment_bytes: copy-in,
// all-reduce and copy-out of one segment follow each other while it is in
// cache, so on the host only the gradients' first read and last write reach
// memory (a whole 25 MiB bucket would stream through memory three times), and
// a segment starts as soon as its own gradients are in.
void Reducer::Launch(int b, size_t k) {
  const BucketState& bs = *buckets_[b];
  const size_t s0 = bs.segs[k].begin, s1 = bs.segs[k].end;
  unsigned char* at = bs.buf->data + s0 * ElementSize(bs.layout.dtype);
  if (dev_) {
    LaunchOnDevice(b, at, s1 - s0);
  } else {
    LaunchOnHost(b, k, at, s1 - s0);
  }
}

void Reducer::Pieces(int b, size_t k, CopyList& part) const {
  const BucketState& bs = *buckets_[b];
  const Bucket& bk = bs.layout;
  const size_t s0 = bs.segs[k].begin, s1 = bs.segs[k].end;
  for (size_t s = bs.seg_slot[k]; s < bs.seg_slot_end[k]; ++s) {
    const int g = bk.grads[s];
    const size_t lo = std::max(bk.offsets[s], s0), hi = std::min(bk.offsets[s] + grads_[g].count, s1);
    if (lo >= hi || ptr_[g] == nullptr || ptr_[g] == SlotPtr(g)) continue;  // empty, unused, or a view
    void* p = static_cast<unsigned char*>(ptr_[g]) + (lo - bk.offsets[s]) * ElementSize(grads_[g].dtype);
    part.tensors.push_back({p, hi - lo, grads_[g].dtype});
    part.offsets.push_back(lo - s0);
  }
}

void* Reducer::CopyKey(int b, size_t s) const {
  const int g = buckets_[b]->layout.grads[s];
  // An empty gradient's pointer is anything (PyTorch gives an empty tensor
  // no storage) and copies nothing: it is left out of the comparison.
  return grads_[g].count == 0 ? nullptr : ptr_[g];
}

// O(slots in the segment) when the pointers are those of the last launch:
// one comparison each.
const SegmentCopies& Reducer::Copies(int b, size_t k) {
  BucketState& bs = *buckets_[b];
  SegmentCopies& c = bs.copies[k];
  const size_t first = bs.seg_slot[k], end = std::max(first, bs.seg_slot_end[k]);
  auto key = [&](size_t s) { return CopyKey(b, s); };
  if (!c.built || !SegmentCopies::Holds(c.ptrs, first, end, key)) {
    if (bs.way[k] == SegmentWay::kPieces) {
      MakePieces(b, k, c);
    } else {
      MakeCopies(b, k, c);
    }
  }
  return c;
}

// The one-shot kernels' checks, once. A refused plan is noted and the
// segment copies nothing, but its all-reduce still runs so the other ranks
// are not left waiting.
void Reducer::MakeCopies(int b, size_t k, SegmentCopies& c) {
  BucketState& bs = *buckets_[b];
  const size_t first = bs.seg_slot[k], end = std::max(first, bs.seg_slot_end[k]);
  SegmentCopies::Fill(c.ptrs, first, end, [&](size_t s) { return CopyKey(b, s); });
  RetireCopies(c);
  c.built = true;
  CopyList part;
  Pieces(b, k, part);
  if (part.tensors.empty()) return;  // views and unused gradients only: nothing to copy
  const Bucket& bk = bs.layout;
  unsigned char* at = bs.buf->data + bs.segs[k].begin * ElementSize(bk.dtype);
  absl::StatusOr<kernels::CopyPlan> in = kernels::CopyPlan::Flatten(part.tensors, at, bk.dtype, part.offsets.data());
  absl::StatusOr<kernels::CopyPlan> out = absl::UnknownError("not made");
  if (in.ok()) out = kernels::CopyPlan::Unflatten(at, bk.dtype, part.offsets.data(), part.tensors, false);
  if (!in.ok() || !out.ok()) {
    Note(in.ok() ? out.status() : in.status());
    c.built = false;
    return;
  }
  c.in = *std::move(in);
  c.out = *std::move(out);
  std::lock_guard<std::mutex> lock(stats_->mu);
  ++stats_->value.copy_plans_built;
}

// Host plans may simply be dropped: their tasks hold copies. A device run
// may still be queued on the comm stream, and the last copy of a device plan
// waits for the whole device when destroyed, so those go to dev_.
void Reducer::RetireCopies(SegmentCopies& c) {
  if (dev_) {
    dev_->Retire(std::move(c.in));
    dev_->Retire(std::move(c.out));
  }
  c.in = c.out = kernels::CopyPlan();
}

// One piece per slot with elements in the segment (the same on every
// rank), each at this rank's memory: the gradient where it is marked, else
// the slot (a view, an unused gradient's zeros). Gaps between slots are left
// out: nobody reads them. Checked once per set of pointers
// (DirectReduce::CheckPieces), like the plans. Gradients whose memory
// overlaps would be averaged twice, perhaps by two in-process threads at
// once: that is noted and this rank's pieces fall back to the slots, so the
// collective still runs with the peers and Finalize reports the error, as
// for a refused copy plan (whose copy-out refuses overlapping destinations).
void Reducer::MakePieces(int b, size_t k, SegmentCopies& c) {
  BucketState& bs = *buckets_[b];
  const Bucket& bk = bs.layout;
  const size_t first = bs.seg_slot[k], end = std::max(first, bs.seg_slot_end[k]);
  SegmentCopies::Fill(c.ptrs, first, end, [&](size_t s) { return CopyKey(b, s); });
  const size_t es = ElementSize(bk.dtype), s0 = bs.segs[k].begin, s1 = bs.segs[k].end;
  std::vector<Piece> pieces;
  std::vector<int> grad;  // per piece
  for (size_t s = first; s < end; ++s) {
    const int g = bk.grads[s];
    const size_t lo = std::max(bk.offsets[s], s0), hi = std::min(bk.offsets[s] + grads_[g].count, s1);
    if (lo >= hi) continue;
    auto* p = static_cast<unsigned char*>(ptr_[g]);
    void* where = p != nullptr && p != SlotPtr(g) ? p + (lo - bk.offsets[s]) * es : bs.buf->data + lo * es;
    pieces.push_back({where, where, lo - s0, hi - lo});
    grad.push_back(g);
  }
  std::vector<Piece> slots = pieces;
  for (Piece& piece : slots) piece.send = piece.recv = bs.buf->data + (s0 + piece.offset) * es;
  const auto label = [&](size_t i) { return "gradient " + GradLabel(grads_, grad[i]); };
  absl::StatusOr<PieceList> checked = direct_->CheckPieces(std::move(pieces), bk.dtype, label);
  c.built = checked.ok();  // else checked again at the next launch
  if (!checked.ok()) {
    Note(checked.status());
    checked = direct_->CheckPieces(std::move(slots), bk.dtype);  // the bucket's own layout: cannot fail
  }
  Note(checked.status());
  c.pieces = checked.ok() ? *std::move(checked) : PieceList();
}

// The segment's way and math come from the plan (shard/segment_plan.h);
// only the memory an in-place segment is reduced in is this rank's choice.
void Reducer::LaunchOnHost(int b, size_t k, unsigned char* at, size_t n) {
  const BucketState& bs = *buckets_[b];
  const Bucket& bk = bs.layout;
  const SegmentWay way = bs.way[k];
  const SegmentMath m = bs.math[k];
  const DataType dt = bk.dtype;
  void* data = nullptr;
  if (way == SegmentWay::kInPlace) {
    const size_t whole = bs.seg_slot[k];
    const int g = bk.grads[whole];
    auto* p = static_cast<unsigned char*>(ptr_[g]);
    if (p != nullptr && p != SlotPtr(g) && reinterpret_cast<uintptr_t>(p) % ElementSize(dt) == 0) {
      data = p + (bs.segs[k].begin - bk.offsets[whole]) * ElementSize(dt);
    }
  }
  kernels::CopyPlan in, out;  // empty: nothing to copy
  PieceList pieces;
  {
    std::lock_guard<std::mutex> lock(stats_->mu);
    ++stats_->value.segments_launched;
    if (data != nullptr) ++stats_->value.segments_in_place;
    else if (way == SegmentWay::kPieces) ++stats_->value.segments_in_pieces;
  }
  if (data != nullptr) {
    // in place: nothing to copy
  } else if (way == SegmentWay::kPieces) {
    pieces = Copies(b, k).pieces;  // shared, not copied
  } else {  // copy, ready, or an in-place segment whose gradient is not there
    const SegmentCopies& c = Copies(b, k);
    in = c.in;
    out = c.out;
    data = at;
  }
  // The segment starts once the stream is done with earlier work and this
  // is enqueued (HostStream::ReachedAt): timed that way, a segment with
  // nothing to copy in (in place, or views) costs no task of its own.
  HostStream* const hs = &*stream_;
  const uint64_t before = hs->Mark();
  const Clock::time_point enqueued = Clock::now();
  // The timeline: the launch on the caller's thread, the copies on the
  // stream's, and the segment's collective labelled with its bucket.
  trace::Sink* const sink = comm_->trace();
  const std::string where = sink != nullptr ? absl::StrFormat("\"bucket\":%d,\"segment\":%zu", b, k) : "";
  if (sink != nullptr) sink->Instant("launch_segment", "reducer", where);
  const trace::Label label("bucket %d segment %zu", b, k);
  // The tasks hold copies of the plans (shared state): a later rebuild of
  // this segment's plans leaves the ones already enqueued intact.
  if (way == SegmentWay::kReady) {
    // The copy-in fills the segment (whatever its status: the call must
    // run on every rank); the call reaches at least the segment's end.
    if (in.elements() > 0) {
      hs->Enqueue([in = std::move(in), m, fill = bs.fill, seg = bs.ready_seg0 + k, sink, where] {
        trace::Span span(sink, "copy_in", "reducer");
        span.Args("%s,\"elements\":%zu", where, in.elements());
        const absl::Status st = in.Run(m.scale_in, nullptr);
        fill->Filled(seg);
        return st;
      });
    }
    Note(direct_->AllReduceReady(bs.fill->buf, bs.ready_elem0 + bs.segs[k].end, m.op, hs));
  } else {
    if (in.elements() > 0) {
      hs->Enqueue([in = std::move(in), m, sink, where] {
        trace::Span span(sink, "copy_in", "reducer");
        span.Args("%s,\"elements\":%zu", where, in.elements());
        return in.Run(m.scale_in, nullptr);
      });
    }
    Note(way == SegmentWay::kPieces ? direct_->AllReducePieces(pieces, m.op, hs)
                                    : comm_->AllReduce(data, data, n, dt, m.op, hs));
  }
  const bool last = k + 1 == bs.segments();
  hs->Enqueue([out = std::move(out), m, hs, before, enqueued, last, stats = stats_, sink, where] {
    absl::Status st;
    {
      trace::Span span(sink, "copy_out", "reducer");
      span.Args("%s,\"elements\":%zu", where, out.elements());
      st = out.Run(m.scale_out, nullptr);
    }
    const absl::StatusOr<Clock::time_point> free = hs->ReachedAt(before);
    const Clock::time_point started = free.ok() ? std::max(*free, enqueued) : enqueued;
    const double s = std::chrono::duration<double>(Clock::now() - started).count();
    std::lock_guard<std::mutex> lock(stats->mu);
    stats->value.comm_seconds += s;
    if (last) ++stats->value.buckets_launched;
    return st;
  });
}

// Everything is enqueued on the comm stream after the producers of the
// bucket's gradients (their events), and the all-reduce is issued even when
// a copy failed to launch, so the other ranks are not left waiting for it.
// A bucket is one segment; its copies run from plans when its pointers are
// those of its previous launch (shard/reducer_state.h, SegmentCopies), else
// as one-shot kernels, which check and lay out every piece on the host.
void Reducer::LaunchOnDevice(int b, unsigned char* at, size_t n) {
  BucketState& bs = *buckets_[b];
  const Bucket& bk = bs.layout;
  const SegmentMath m = bs.math[0];
  void* const s = dev_->stream();
  SegmentCopies& c = bs.copies[0];
  const size_t first = bs.seg_slot[0], end = std::max(first, bs.seg_slot_end[0]);
  auto key = [&](size_t slot) { return CopyKey(b, slot); };
  bool planned = c.built && SegmentCopies::Holds(c.ptrs, first, end, key);
  if (!planned && SegmentCopies::Holds(c.seen, first, end, key)) {
    MakeCopies(b, 0, c);
    planned = true;  // refused: noted, and c copies nothing
  }
  CopyList part;  // otherwise: the one-shot kernels' pieces
  if (!planned) {
    SegmentCopies::Fill(c.seen, first, end, key);
    Pieces(b, 0, part);
  }
  Note(dev_->WaitProduced(bk.grads));
  if (planned) {
    Note(c.in.Run(m.scale_in, s));
  } else if (!part.tensors.empty()) {
    Note(kernels::Flatten(part.tensors, at, bk.dtype, part.offsets.data(), m.scale_in, s));
  }
  Note(comm_->AllReduce(at, at, n, bk.dtype, m.op, s));
  if (planned) {
    Note(c.out.Run(m.scale_out, s));
  } else if (!part.tensors.empty()) {
    Note(kernels::Unflatten(at, bk.dtype, part.offsets.data(), part.tensors, m.scale_out, false, s));
  }
  std::lock_guard<std::mutex> lock(stats_->mu);
  ++stats_->value.buckets_launched;
  ++stats_->value.segments_launched;
}

void Reducer::ZeroSlot(int g) {
  const size_t bytes = grads_[g].count * ElementSize(buckets_[plan_.bucket_of[g]]->layout.dtype);
  unsigned char* slot = static_cast<unsigned char*>(SlotPtr(g));
  const bool view = options_.gradient_as_bucket_view;
  // In view mode the slot is the framework's gradient: on CUDA, touch it
  // only after the framework's last known work.
  if (dev_ && view) Note(dev_->After(last_stream_));
  // ... and keep its value in case no rank uses it (find-unused leaves those untouched).
  if (view && options_.find_unused) {
    absl::StatusOr<std::unique_ptr<Buffer>> saved = NewBuffer(bytes);
    if (saved.ok()) {
      saved_[g] = std::move(saved).value();
      Note(CopyBytes(saved_[g]->data, slot, bytes));
    } else {
      Note(saved.status());
    }
  }
  Note(Zero(slot, bytes));
}

void Reducer::RestoreUnusedEverywhere() {
  for (int g = 0; g < num_grads(); ++g) {
    if (saved_[g] == nullptr) continue;
    if (used_[g] == 0) Note(CopyBytes(SlotPtr(g), saved_[g]->data, saved_[g]->bytes));
    saved_[g].reset();  // on CUDA, freed on the comm stream after the copy
  }
}

}  // namespace shard
}  // namespace weft
