// The reducer's bucket side: buffers, layout and rebuild, and the work each
// bucket enqueues on the comm stream (copy-in, all-reduce, copy-out).
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
  while (next_launch_ < static_cast<int>(buckets_.size()) && buckets_[next_launch_]->pending == 0) Launch(next_launch_++);
}

void Reducer::SlotIn(int g) {
  --buckets_[plan_.bucket_of[g]]->pending;
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

void Reducer::Launch(int b) {
  BucketState& bs = *buckets_[b];
  const Bucket& bk = bs.layout;
  const BucketMath m = Math(bk);
  auto in = std::make_shared<CopyList>();
  for (size_t s = 0; s < bk.grads.size(); ++s) {
    const int g = bk.grads[s];
    if (ptr_[g] == nullptr || ptr_[g] == SlotPtr(g)) continue;  // unused, or already a view
    in->tensors.push_back({ptr_[g], grads_[g].count, grads_[g].dtype});
    in->offsets.push_back(bk.offsets[s]);
  }
  unsigned char* data = bs.buf->data;
  auto started = std::make_shared<std::chrono::steady_clock::time_point>();
  stream_.Enqueue([in, data, dt = bk.dtype, m, started] {
    *started = std::chrono::steady_clock::now();
    if (in->tensors.empty()) return absl::OkStatus();
    return kernels::Flatten(in->tensors, data, dt, in->offsets.data(), m.scale_in, nullptr);
  });
  const absl::Status issued = comm_->AllReduce(data, data, bk.length, bk.dtype, m.op, &stream_);
  if (!issued.ok() && launch_error_.ok()) launch_error_ = issued;
  EnqueueCopyOut(b);
  stream_.Enqueue([stats = stats_, started] {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *started).count();
    std::lock_guard<std::mutex> lock(stats->mu);
    stats->value.comm_seconds += s;
    ++stats->value.buckets_launched;
    return absl::OkStatus();
  });
}

void Reducer::EnqueueCopyOut(int b) {
  const Bucket& bk = buckets_[b]->layout;
  const BucketMath m = Math(bk);
  auto out = std::make_shared<CopyList>();
  for (size_t s = 0; s < bk.grads.size(); ++s) {
    const int g = bk.grads[s];
    if (ptr_[g] == nullptr || ptr_[g] == SlotPtr(g)) continue;  // unused here, or a view
    out->tensors.push_back({ptr_[g], grads_[g].count, grads_[g].dtype});
    out->offsets.push_back(bk.offsets[s]);
  }
  if (out->tensors.empty()) return;
  const unsigned char* data = buckets_[b]->buf->data;
  stream_.Enqueue([out, data, dt = bk.dtype, m] {
    return kernels::Unflatten(data, dt, out->offsets.data(), out->tensors, m.scale_out, false, nullptr);
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
