#include "shard/bucket_plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/limits.h"
#include "core/status.h"

namespace weft {
namespace shard {
namespace {

size_t RoundUp(size_t x, size_t m) { return (x + m - 1) / m * m; }

absl::Status CheckOptions(size_t n, const PlanOptions& o) {
  if (o.bucket_cap_bytes == 0) return InvalidArgument("bucket_cap_bytes = 0 (expected at least 1)");
  if (o.first_bucket_cap_bytes == 0) return InvalidArgument("first_bucket_cap_bytes = 0 (expected at least 1)");
  if (o.alignment_bytes == 0 || (o.alignment_bytes & (o.alignment_bytes - 1)) != 0) {
    return InvalidArgument("alignment_bytes = %zu is not a power of two", o.alignment_bytes);
  }
  if (o.pad_multiple == 0) return InvalidArgument("pad_multiple = 0 (expected at least 1)");
  // Past these no bucket could be allocated, and rounding up to them would wrap.
  if (o.alignment_bytes > kMaxBufferBytes) {
    return InvalidArgument("alignment_bytes = %zu is more than any buffer holds (%zu)", o.alignment_bytes,
                           kMaxBufferBytes);
  }
  if (o.pad_multiple > kMaxBufferBytes) {
    return InvalidArgument("pad_multiple = %zu is more than any buffer holds (%zu)", o.pad_multiple, kMaxBufferBytes);
  }
  if (o.comm_dtype && !(IsValid(*o.comm_dtype) && IsFloating(*o.comm_dtype))) {
    return InvalidArgument("comm dtype = %d is not a floating-point weftDataType_t",
                           static_cast<int>(*o.comm_dtype));
  }
  if (o.order.empty()) return absl::OkStatus();
  if (o.order.size() != n) return InvalidArgument("order has %zu entries for %zu gradients", o.order.size(), n);
  std::vector<bool> seen(n, false);
  for (size_t i = 0; i < n; ++i) {
    const int g = o.order[i];
    if (g < 0 || static_cast<size_t>(g) >= n) {
      return InvalidArgument("order[%zu] = %d is not a gradient index (expected 0..%zu)", i, g, n - 1);
    }
    if (seen[g]) return InvalidArgument("order[%zu] = %d repeats a gradient: order must be a permutation", i, g);
    seen[g] = true;
  }
  return absl::OkStatus();
}

}  // namespace

DataType BucketType(DataType t, const PlanOptions& options) {
  return options.comm_dtype && IsFloating(t) ? *options.comm_dtype : t;
}

std::string GradLabel(absl::Span<const GradSpec> grads, int index) {
  if (index >= 0 && static_cast<size_t>(index) < grads.size() && !grads[index].name.empty()) {
    return absl::StrFormat("'%s'", grads[index].name);
  }
  return absl::StrFormat("#%d", index);
}

absl::StatusOr<BucketPlan> PlanBuckets(absl::Span<const GradSpec> grads, const PlanOptions& options) {
  const size_t n = grads.size();
  if (n > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return InvalidArgument("%zu gradients is more than an int can index", n);
  }
  RETURN_IF_ERROR(CheckOptions(n, options));
  for (size_t i = 0; i < n; ++i) {
    if (!IsValid(grads[i].dtype)) {
      return InvalidArgument("gradient %s: dtype = %d is not a weftDataType_t",
                             GradLabel(grads, static_cast<int>(i)), static_cast<int>(grads[i].dtype));
    }
    // In its own type and in its bucket's: both are buffers weft allocates or reads.
    const std::string what = absl::StrFormat("gradient %s: count", GradLabel(grads, static_cast<int>(i)));
    RETURN_IF_ERROR(CheckedBytes(what, grads[i].count, ElementSize(grads[i].dtype)).status());
    RETURN_IF_ERROR(CheckedBytes(what, grads[i].count, ElementSize(BucketType(grads[i].dtype, options))).status());
  }

  BucketPlan plan;
  plan.bucket_of.assign(n, -1);
  plan.slot_of.assign(n, -1);
  struct Family {
    int open = -1;  // the bucket being filled, or -1
    int opened = 0;
  };
  std::map<std::pair<int, int>, Family> families;
  std::vector<size_t> caps;  // per bucket, in bytes

  // No bucket grows past kMaxBufferBytes (whatever the caps), so lengths in
  // bytes cannot wrap; only the padding can take it over, and is refused.
  absl::Status padding = absl::OkStatus();
  auto close = [&](Family& f) {
    Bucket& bk = plan.buckets[f.open];
    bk.length = RoundUp(bk.length, options.pad_multiple);
    if (bk.length > kMaxBufferBytes / ElementSize(bk.dtype) && padding.ok()) {
      padding = InvalidArgument("bucket %d: %zu elements (padded to a multiple of pad_multiple = %zu) are more "
                                "than any buffer holds (%zu bytes)", f.open, bk.length, options.pad_multiple,
                                kMaxBufferBytes);
    }
    f.open = -1;
  };

  for (size_t k = 0; k < n; ++k) {
    const int g = options.order.empty() ? static_cast<int>(n - 1 - k) : options.order[k];
    const GradSpec& spec = grads[g];
    const DataType bt = BucketType(spec.dtype, options);
    const size_t es = ElementSize(bt);
    const size_t align_elems = options.alignment_bytes > es ? options.alignment_bytes / es : 1;
    Family& f = families[{static_cast<int>(spec.dtype), static_cast<int>(spec.memory)}];

    // A gradient that would overflow a non-empty bucket starts the next one.
    if (f.open >= 0) {
      const Bucket& bk = plan.buckets[f.open];
      if ((RoundUp(bk.length, align_elems) + spec.count) * es > caps[f.open]) close(f);
    }
    if (f.open < 0) {
      Bucket bk;
      bk.dtype = bt;
      bk.memory = spec.memory;
      plan.buckets.push_back(std::move(bk));
      caps.push_back(std::min(f.opened++ == 0 ? options.first_bucket_cap_bytes : options.bucket_cap_bytes,
                              kMaxBufferBytes));
      f.open = static_cast<int>(plan.buckets.size() - 1);
    }
    Bucket& bk = plan.buckets[f.open];
    const size_t offset = RoundUp(bk.length, align_elems);
    plan.bucket_of[g] = f.open;
    plan.slot_of[g] = static_cast<int>(bk.grads.size());
    bk.grads.push_back(g);
    bk.offsets.push_back(offset);
    bk.length = offset + spec.count;
    // A full bucket (or one holding a gradient over the cap) takes no more.
    if (bk.length * es >= caps[f.open]) close(f);
  }
  for (auto& [key, f] : families) {
    if (f.open >= 0) close(f);
  }
  RETURN_IF_ERROR(padding);
  return plan;
}

std::vector<Segment> CutSegments(const Bucket& bucket, absl::Span<const size_t> slot_counts, size_t target,
                                 const std::vector<bool>& whole) {
  target = std::max<size_t>(target, 1);
  std::vector<Segment> out;
  bool open = false;
  size_t begin = 0, last_end = 0;  // the open run, and where its last slot ends
  for (size_t s = 0; s < bucket.offsets.size(); ++s) {
    const size_t o = bucket.offsets[s], c = slot_counts[s], e = o + c;
    if (c == 0) continue;
    if (whole[s] && c >= target) {
      if (open) out.push_back({begin, last_end});
      out.push_back({o, e});
      open = false;
      continue;
    }
    if (!open) begin = o, open = true;
    while (e - begin >= target) {
      out.push_back({begin, begin + target});
      begin += target;
    }
    open = begin < e;
    last_end = e;
  }
  if (open) out.push_back({begin, last_end});
  return out;
}

}  // namespace shard
}  // namespace weft
