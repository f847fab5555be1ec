// The reducer's bucket side: buffers, layout and rebuild, and the work each
// bucket enqueues on the comm stream (copy-in, all-reduce, copy-out).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <new>

#include "core/status.h"
#include "kernels/kernels.h"
#include "shard/reducer.h"
#include "shard/reducer_state.h"

namespace weft {
namespace shard {

using Clock = std::chrono::steady_clock;

Reducer::Buffer::Buffer(size_t n)
    : bytes(n), data(static_cast<unsigned char*>(::operator new(n == 0 ? 1 : n, std::align_val_t(kAlign)))) {
  std::memset(data, 0, bytes);  // alignment gaps and padding stay zero forever
}

Reducer::Buffer::~Buffer() { ::operator delete(data, std::align_val_t(kAlign)); }

void* Reducer::SlotPtr(int g) const {
  const int b = plan_.bucket_of[g];
  const Bucket& bk = buckets_[b]->layout;
  return buckets_[b]->buf->data + bk.offsets[plan_.slot_of[g]] * ElementSize(bk.dtype);
}

absl::Status Reducer::Layout(const PlanOptions& plan_options) {
  ASSIGN_OR_RETURN(BucketPlan plan, PlanBuckets(grads_, plan_options));
  std::vector<std::unique_ptr<BucketState>> buckets;
  for (const Bucket& bk : plan.buckets) {
    auto bs = std::make_unique<BucketState>();
    bs->layout = bk;
    bs->buf = std::make_unique<Buffer>(bk.bytes());
    bs->seg_elems = std::max<size_t>(options_.segment_bytes / ElementSize(bk.dtype), 1);
    bs->seg_grads.assign((bk.length + bs->seg_elems - 1) / bs->seg_elems, 0);
    for (size_t s = 0; s < bk.grads.size(); ++s) {
      const size_t count = grads_[bk.grads[s]].count;
      if (count == 0) continue;  // holds no element, so no segment waits for it
      for (size_t k = bk.offsets[s] / bs->seg_elems; k <= (bk.offsets[s] + count - 1) / bs->seg_elems; ++k) {
        ++bs->seg_grads[k];
      }
    }
    buckets.push_back(std::move(bs));
  }
  // The old slots hold the last averages (a view's value, or the only copy
  // of a gradient unused here): carry them over into the new layout.
  if (!buckets_.empty()) {
    for (int g = 0; g < num_grads(); ++g) {
      const Bucket& nb = plan.buckets[plan.bucket_of[g]];
      void* dst = buckets[plan.bucket_of[g]]->buf->data + nb.offsets[plan.slot_of[g]] * ElementSize(nb.dtype);
      std::memcpy(dst, SlotPtr(g), grads_[g].count * ElementSize(nb.dtype));
    }
  }
  const bool relayout = !buckets_.empty();
  plan_ = std::move(plan);
  buckets_ = std::move(buckets);
  if (relayout) ++layout_version_;
  return absl::OkStatus();
}

absl::Status Reducer::Rebuild() {
  rebuilt_ = true;
  const int n = num_grads();
  if (static_cast<int>(ready_order_.size()) != n || n == 0) return absl::OkStatus();
  std::vector<int32_t> order(ready_order_.begin(), ready_order_.end());
  RETURN_IF_ERROR(comm_->Broadcast(order.data(), order.data(), n, DataType::kInt32, 0, nullptr));
  PlanOptions po = PlanOptionsFor(options_);
  po.order.assign(order.begin(), order.end());
  ASSIGN_OR_RETURN(BucketPlan plan, PlanBuckets(grads_, po));
  bool same = plan.buckets.size() == plan_.buckets.size();
  for (size_t b = 0; same && b < plan.buckets.size(); ++b) {
    same = plan.buckets[b].grads == plan_.buckets[b].grads;
  }
  if (same) return absl::OkStatus();
  return Layout(po);
}

void Reducer::LaunchReady() {
  while (next_bucket_ < static_cast<int>(buckets_.size())) {
    BucketState& bs = *buckets_[next_bucket_];
    if (next_segment_ == bs.segments()) {
      ++next_bucket_;
      next_segment_ = 0;
      continue;
    }
    if (bs.seg_pending[next_segment_] > 0) return;
    Launch(next_bucket_, next_segment_++);
  }
}

void Reducer::SlotIn(int g) {
  BucketState& bs = *buckets_[plan_.bucket_of[g]];
  const size_t off = bs.layout.offsets[plan_.slot_of[g]], count = grads_[g].count;
  if (count > 0) {
    for (size_t k = off / bs.seg_elems; k <= (off + count - 1) / bs.seg_elems; ++k) --bs.seg_pending[k];
  }
  LaunchReady();
}

Reducer::BucketMath Reducer::Math(const Bucket& bk) const {
  BucketMath m;
  const float n = static_cast<float>(comm_->size());
  if (!IsFloating(bk.dtype) || options_.gradient_as_bucket_view) {
    m.op = RedOp::kAvg;  // in place; integers divide with truncation
  } else if (bk.dtype == DataType::kFloat16 && options_.comm_dtype) {
    m.scale_in = m.scale_out = 1.0f / std::sqrt(n);  // neither the sum nor the result overflows
  } else {
    m.scale_in = 1.0f / n;
  }
  return m;
}

// A bucket runs as segments of at most options_.segment_bytes: copy-in,
// all-reduce and copy-out of one segment follow each other while it is in
// cache, so on the host only the gradients' first read and last write reach
// memory (a whole 25 MiB bucket would stream through memory three times), and
// a segment starts as soon as its own gradients are in.
void Reducer::Launch(int b, size_t k) {
  const BucketState& bs = *buckets_[b];
  const Bucket& bk = bs.layout;
  const BucketMath m = Math(bk);
  const size_t es = ElementSize(bk.dtype);
  const size_t s0 = k * bs.seg_elems, s1 = std::min(bk.length, s0 + bs.seg_elems);
  auto part = std::make_shared<CopyList>();  // the pieces of gradients inside [s0, s1)
  for (size_t s = 0; s < bk.grads.size(); ++s) {
    const int g = bk.grads[s];
    const size_t lo = std::max(bk.offsets[s], s0), hi = std::min(bk.offsets[s] + grads_[g].count, s1);
    if (lo >= hi || ptr_[g] == nullptr || ptr_[g] == SlotPtr(g)) continue;  // elsewhere, unused, or a view
    void* p = static_cast<unsigned char*>(ptr_[g]) + (lo - bk.offsets[s]) * ElementSize(grads_[g].dtype);
    part->tensors.push_back({p, hi - lo, grads_[g].dtype});
    part->offsets.push_back(lo - s0);
  }
  unsigned char* at = bs.buf->data + s0 * es;
  auto started = std::make_shared<Clock::time_point>();
  stream_.Enqueue([part, at, dt = bk.dtype, m, started] {
    *started = Clock::now();
    if (part->tensors.empty()) return absl::OkStatus();
    return kernels::Flatten(part->tensors, at, dt, part->offsets.data(), m.scale_in, nullptr);
  });
  const absl::Status issued = comm_->AllReduce(at, at, s1 - s0, bk.dtype, m.op, &stream_);
  if (!issued.ok() && launch_error_.ok()) launch_error_ = issued;
  const bool last = k + 1 == bs.segments();
  stream_.Enqueue([part, at, dt = bk.dtype, m, started, last, stats = stats_] {
    absl::Status st;
    if (!part->tensors.empty()) {
      st = kernels::Unflatten(at, dt, part->offsets.data(), part->tensors, m.scale_out, false, nullptr);
    }
    const double s = std::chrono::duration<double>(Clock::now() - *started).count();
    std::lock_guard<std::mutex> lock(stats->mu);
    stats->value.comm_seconds += s;
    if (last) ++stats->value.buckets_launched;
    return st;
  });
}

void Reducer::ZeroSlot(int g) {
  const size_t bytes = grads_[g].count * ElementSize(buckets_[plan_.bucket_of[g]]->layout.dtype);
  unsigned char* slot = static_cast<unsigned char*>(SlotPtr(g));
  // In view mode the slot is the framework's gradient: keep its value in
  // case no rank uses it (find-unused leaves those untouched).
  if (options_.gradient_as_bucket_view && options_.find_unused) saved_[g].assign(slot, slot + bytes);
  std::memset(slot, 0, bytes);
}

void Reducer::RestoreUnusedEverywhere() {
  for (int g = 0; g < num_grads(); ++g) {
    if (used_[g] == 0 && !saved_[g].empty()) std::memcpy(SlotPtr(g), saved_[g].data(), saved_[g].size());
    saved_[g].clear();
  }
}

}  // namespace shard
}  // namespace weft
