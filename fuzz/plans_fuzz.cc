// The two planning functions, data in and data out, on any gradient list
// and parameter list: the bucket plan (shard/bucket_plan.h: PlanBuckets and
// CutSegments) and the shard layout (shard/layout.h: PlanShards). Whatever
// they accept must be a plan the reducer and sharder can trust: every
// gradient in exactly one slot, slots aligned, in order, disjoint and inside
// their bucket; every parameter's elements held exactly once across ranks,
// inside the rank's shard.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/input.h"
#include "shard/bucket_plan.h"
#include "shard/layout.h"

namespace {

using weft::DataType;
using weft::MemKind;
using weft_fuzz::Input;
namespace shard = weft::shard;

void Buckets(Input& in) {
  std::vector<shard::GradSpec> grads(in.ConsumeIntegralInRange<size_t>(0, 12));
  for (shard::GradSpec& g : grads) {
    // Counts up to 2^40: the plan is arithmetic only, so large is cheap here.
    g.count = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegral<size_t>()
                                                        : in.ConsumeIntegralInRange<size_t>(0, size_t{1} << in.ConsumeIntegralInRange<int>(0, 40));
    g.dtype = static_cast<DataType>(in.EnumInt(weft::kNumDataTypes));
    g.memory = static_cast<MemKind>(in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegral<int>() : in.ConsumeIntegralInRange<int>(0, 1));
  }
  shard::PlanOptions o;
  auto pick = [&](size_t dflt) { return in.ConsumeBool() ? dflt : in.ConsumeIntegralInRange<size_t>(0, size_t{1} << in.ConsumeIntegralInRange<int>(0, 62)); };
  o.bucket_cap_bytes = pick(o.bucket_cap_bytes);
  o.first_bucket_cap_bytes = pick(o.first_bucket_cap_bytes);
  o.alignment_bytes = pick(o.alignment_bytes);
  o.pad_multiple = pick(o.pad_multiple);
  if (in.ConsumeBool()) o.comm_dtype = static_cast<DataType>(in.EnumInt(weft::kNumDataTypes));
  if (in.ConsumeBool()) {
    for (size_t i = 0; i < grads.size() + (in.ConsumeIntegralInRange<int>(0, 7) == 0 ? 1 : 0); ++i) {
      o.order.push_back(in.ConsumeIntegralInRange<int>(-1, static_cast<int>(grads.size())));
    }
  }
  auto plan = shard::PlanBuckets(grads, o);
  if (!plan.ok()) return;
  std::vector<int> seen(grads.size(), 0);
  FUZZ_EXPECT(plan->bucket_of.size() == grads.size() && plan->slot_of.size() == grads.size(), "per-gradient tables");
  for (size_t b = 0; b < plan->buckets.size(); ++b) {
    const shard::Bucket& bucket = plan->buckets[b];
    FUZZ_EXPECT(bucket.grads.size() == bucket.offsets.size(), "bucket %zu: %zu grads, %zu offsets", b,
                bucket.grads.size(), bucket.offsets.size());
    const size_t eb = weft::ElementSize(bucket.dtype);
    FUZZ_EXPECT(eb > 0, "bucket %zu has no element type", b);
    size_t end = 0;
    std::vector<size_t> counts;
    for (size_t s = 0; s < bucket.grads.size(); ++s) {
      const int g = bucket.grads[s];
      FUZZ_EXPECT(g >= 0 && static_cast<size_t>(g) < grads.size(), "bucket %zu slot %zu: gradient %d", b, s, g);
      ++seen[g];
      FUZZ_EXPECT(plan->bucket_of[g] == static_cast<int>(b) && plan->slot_of[g] == static_cast<int>(s),
                  "gradient %d's tables", g);
      const size_t off = bucket.offsets[s];
      FUZZ_EXPECT(off >= end, "bucket %zu: slot %zu at %zu overlaps the previous one ending at %zu", b, s, off, end);
      FUZZ_EXPECT((off * eb) % o.alignment_bytes == 0, "bucket %zu: slot %zu at element %zu is not aligned to %zu bytes",
                  b, s, off, o.alignment_bytes);
      FUZZ_EXPECT(grads[g].count <= bucket.length - off && off <= bucket.length, "bucket %zu: slot %zu past its length", b, s);
      end = off + grads[g].count;
      counts.push_back(grads[g].count);
    }
    FUZZ_EXPECT(bucket.length % o.pad_multiple == 0, "bucket %zu: length %zu not a multiple of %zu", b, bucket.length,
                o.pad_multiple);
    // Cutting makes length / target segments: keep that to thousands.
    const size_t target = in.ConsumeIntegralInRange<size_t>(1, 1 << 16);
    if (bucket.length / target > 4096) continue;
    std::vector<bool> whole(bucket.grads.size());
    for (size_t s = 0; s < whole.size(); ++s) whole[s] = in.ConsumeBool();
    size_t last = 0;
    for (const shard::Segment& seg : shard::CutSegments(bucket, counts, target, whole)) {
      FUZZ_EXPECT(seg.begin >= last && seg.begin < seg.end && seg.end <= bucket.length,
                  "bucket %zu: segment [%zu, %zu) after %zu in length %zu", b, seg.begin, seg.end, last, bucket.length);
      last = seg.end;
    }
  }
  for (size_t g = 0; g < grads.size(); ++g) FUZZ_EXPECT(seen[g] == 1, "gradient %zu in %d slots", g, seen[g]);
}

void Shards(Input& in) {
  std::vector<shard::ParamSpec> params(in.ConsumeIntegralInRange<size_t>(0, 8));
  for (shard::ParamSpec& p : params) {
    p.shape.resize(in.ConsumeIntegralInRange<size_t>(0, 4));
    for (int64_t& d : p.shape) {
      d = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegral<int64_t>()
                                                     : in.ConsumeIntegralInRange<int64_t>(0, int64_t{1} << in.ConsumeIntegralInRange<int>(0, 20));
    }
  }
  const int world = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegral<int>() : in.ConsumeIntegralInRange<int>(1, 9);
  const auto kind = in.ConsumeBool() ? shard::LayoutKind::kFlat : shard::LayoutKind::kPerParam;
  auto layout = shard::PlanShards(params, world, kind);
  if (!layout.ok()) return;
  FUZZ_EXPECT(world >= 1, "a layout for world %d", world);
  FUZZ_EXPECT(layout->unsharded_numel() >= layout->total_numel, "shards of %zu x %d hold fewer than %zu elements",
              layout->shard_numel, world, layout->total_numel);
  if (world > 64) return;  // the per-rank walk below is O(world * params)
  std::vector<size_t> held(params.size(), 0);
  for (int r = 0; r < world; ++r) {
    const std::vector<shard::ParamShard> mine = layout->RankShards(r);
    FUZZ_EXPECT(mine.size() == params.size(), "rank %d: %zu entries for %zu parameters", r, mine.size(), params.size());
    size_t end = 0;
    for (const shard::ParamShard& s : mine) {
      if (s.length == 0) continue;
      const size_t numel = layout->numel[s.param];
      FUZZ_EXPECT(s.param_offset <= numel && s.length <= numel - s.param_offset, "rank %d: parameter %d's part past it", r, s.param);
      FUZZ_EXPECT(s.shard_offset >= end && s.shard_offset <= layout->shard_numel &&
                      s.length <= layout->shard_numel - s.shard_offset,
                  "rank %d: parameter %d's part at %zu+%zu overlaps or leaves the shard of %zu", r, s.param,
                  s.shard_offset, s.length, layout->shard_numel);
      end = s.shard_offset + s.length;
      held[s.param] += s.length;
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    FUZZ_EXPECT(held[i] == layout->numel[i], "parameter %zu: %zu of %zu elements held", i, held[i], layout->numel[i]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  if (in.ConsumeBool()) {
    Buckets(in);
  } else {
    Shards(in);
  }
  return 0;
}
