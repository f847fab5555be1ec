// The multi-tensor kernels' descriptors from a hostile caller: tensor lists
// (counts, dtypes, alignment), flatten/unflatten offsets and chunk layouts
// (world, chunk counts). Every buffer is allocated to exactly the size the
// descriptors imply, so an access weft makes past them is an ASan report; a
// huge count, offset or world must be refused; and an accepted flatten or
// unflatten must write what its copy plan (checked once, run many times)
// writes, byte for byte.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/c_calls.h"
#include "fuzz/input.h"
#include "weft/weft.h"

namespace {

using weft_fuzz::Buffer;
using weft_fuzz::Input;

// A tensor list whose memory the target owns. `huge` records whether any
// count is past every limit, so the call must be refused.
struct Tensors {
  std::vector<weftTensor_t> t;
  std::vector<std::unique_ptr<Buffer>> mem;
  bool huge = false;
};

Tensors MakeTensors(Input& in, int n) {
  Tensors ts;
  for (int i = 0; i < n; ++i) {
    weftTensor_t t{};
    const int dtype = in.EnumInt(weftNumTypes);
    weft_fuzz::SetEnum(&t.dtype, dtype);
    t.count = in.Count(&ts.huge);
    const bool huge = t.count > weft_fuzz::kMaxRealCount;
    const size_t eb = weft_fuzz::ElementBytes(dtype);
    // A misaligned pointer now and then: weft must refuse it, not load it.
    const size_t skew = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? 1 : 0;
    auto buf = std::make_unique<Buffer>((huge ? 8 : t.count * eb) + skew);
    if (!huge) weft_fuzz::FillFinite(in, static_cast<unsigned char*>(buf->get()) + skew, t.count, dtype);
    t.data = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : static_cast<unsigned char*>(buf->get()) + skew;
    ts.t.push_back(t);
    ts.mem.push_back(std::move(buf));
  }
  return ts;
}

// Offsets for a flatten or unflatten (NULL: packed), and the flat buffer's
// element count they imply.
struct Offsets {
  std::vector<size_t> v;
  bool packed = true;
  bool huge = false;
  size_t extent = 0;
};

Offsets MakeOffsets(Input& in, const Tensors& ts) {
  Offsets o;
  o.packed = in.ConsumeBool();
  for (const weftTensor_t& t : ts.t) {
    size_t off = o.packed ? o.extent : in.Count(&o.huge);
    if (!o.packed) o.v.push_back(off);
    if (!o.huge && !ts.huge) o.extent = std::max(o.extent, off + t.count);
  }
  return o;
}

int N(Input& in) { return in.ConsumeIntegralInRange<int>(-2, 6); }

void Flatten(Input& in) {
  Tensors srcs = MakeTensors(in, std::max(0, N(in)));
  const int n = in.ConsumeIntegralInRange<int>(0, 9) == 0 ? -1 : static_cast<int>(srcs.t.size());
  Offsets off = MakeOffsets(in, srcs);
  const int dst_dtype = in.EnumInt(weftNumTypes);
  const float scale = in.Scale();
  const bool huge = srcs.huge || off.huge;
  const size_t bytes = huge ? 8 : off.extent * weft_fuzz::ElementBytes(dst_dtype);
  Buffer dst(bytes), dst2(bytes);
  const size_t* offsets = off.packed ? nullptr : off.v.data();
  const weftResult_t r = FuzzFlatten(srcs.t.data(), n, dst.get(), dst_dtype, offsets, scale);
  FUZZ_EXPECT(!(huge && r == weftSuccess), "a huge count or offset accepted by weftFlatten");
  if (r != weftSuccess) return;
  weftCopyPlan_t plan = nullptr;
  FUZZ_EXPECT(FuzzFlattenPlan(srcs.t.data(), n, dst2.get(), dst_dtype, offsets, &plan) == weftSuccess,
              "weftFlattenPlanCreate refused what weftFlatten accepted");
  FUZZ_EXPECT(weftCopyPlanExecute(plan, scale, nullptr) == weftSuccess, "the plan's execution failed");
  FUZZ_EXPECT(weftCopyPlanDestroy(plan) == weftSuccess, "weftCopyPlanDestroy failed");
  FUZZ_EXPECT(bytes == 0 || std::memcmp(dst.get(), dst2.get(), bytes) == 0, "the flatten plan wrote other bytes than weftFlatten");
}

void Unflatten(Input& in) {
  Tensors dsts = MakeTensors(in, std::max(0, N(in)));
  const int n = static_cast<int>(dsts.t.size());
  Offsets off = MakeOffsets(in, dsts);
  const int src_dtype = in.EnumInt(weftNumTypes);
  const bool huge = dsts.huge || off.huge;
  Buffer src(huge ? 8 : off.extent * weft_fuzz::ElementBytes(src_dtype));
  if (!huge) weft_fuzz::FillFinite(in, src.get(), off.extent, src_dtype);
  const float scale = in.Scale();
  const int accumulate = in.ConsumeBool();
  const size_t* offsets = off.packed ? nullptr : off.v.data();
  // A copy of the destinations' old contents, for the plan's run.
  std::vector<std::vector<unsigned char>> before;
  for (int i = 0; i < n; ++i) {
    const auto* p = static_cast<const unsigned char*>(dsts.mem[i]->get());
    before.emplace_back(p, p + dsts.mem[i]->bytes());
  }
  const weftResult_t r = FuzzUnflatten(src.get(), src_dtype, offsets, dsts.t.data(), n, scale, accumulate);
  FUZZ_EXPECT(!(huge && r == weftSuccess), "a huge count or offset accepted by weftUnflatten");
  if (r != weftSuccess) return;
  std::vector<std::vector<unsigned char>> after;
  for (int i = 0; i < n; ++i) {
    auto* p = static_cast<unsigned char*>(dsts.mem[i]->get());
    after.emplace_back(p, p + dsts.mem[i]->bytes());
    if (!before[i].empty()) std::memcpy(p, before[i].data(), before[i].size());
  }
  weftCopyPlan_t plan = nullptr;
  FUZZ_EXPECT(FuzzUnflattenPlan(src.get(), src_dtype, offsets, dsts.t.data(), n, accumulate, &plan) == weftSuccess,
              "weftUnflattenPlanCreate refused what weftUnflatten accepted");
  FUZZ_EXPECT(weftCopyPlanExecute(plan, scale, nullptr) == weftSuccess, "the plan's execution failed");
  FUZZ_EXPECT(weftCopyPlanDestroy(plan) == weftSuccess, "weftCopyPlanDestroy failed");
  for (int i = 0; i < n; ++i) {
    if (after[i].empty()) continue;
    FUZZ_EXPECT(std::memcmp(dsts.mem[i]->get(), after[i].data(), after[i].size()) == 0,
                "the unflatten plan wrote other bytes than weftUnflatten into dsts[%d]", i);
  }
}

// A chunk layout: world (small, or past kMaxRanks), chunk counts (NULL:
// ceil(count / world)) and the slab size S they imply.
struct Chunks {
  int world = 1;
  std::vector<size_t> counts;
  bool given = false;
  bool huge = false;
  size_t slab = 0;
};

Chunks MakeChunks(Input& in, const Tensors& ts) {
  Chunks c;
  c.world = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? in.ConsumeIntegral<int>() : in.ConsumeIntegralInRange<int>(-1, 9);
  if (c.world > (1 << 20)) c.huge = true;
  c.given = in.ConsumeBool();
  for (const weftTensor_t& t : ts.t) {
    size_t chunk = 0;
    if (c.given) {
      chunk = in.Count(&c.huge);
      c.counts.push_back(chunk);
    } else if (c.world > 0 && t.count <= weft_fuzz::kMaxRealCount) {
      chunk = (t.count + static_cast<size_t>(c.world) - 1) / static_cast<size_t>(c.world);
    }
    if (!c.huge && chunk <= weft_fuzz::kMaxRealCount) c.slab += chunk;
  }
  return c;
}

void ChunkCatSplit(Input& in, bool split) {
  Tensors ts = MakeTensors(in, std::max(0, N(in)));
  const int n = static_cast<int>(ts.t.size());
  Chunks c = MakeChunks(in, ts);
  const int flat_dtype = in.EnumInt(weftNumTypes);
  const bool huge = ts.huge || c.huge;
  const size_t elems = huge || c.world < 1 ? 1 : static_cast<size_t>(c.world) * c.slab;
  Buffer flat(elems * weft_fuzz::ElementBytes(flat_dtype));
  if (split) weft_fuzz::FillFinite(in, flat.get(), elems, flat_dtype);
  const size_t* counts = c.given ? c.counts.data() : nullptr;
  const float scale = in.Scale();
  const weftResult_t r =
      split ? FuzzChunkSplit(flat.get(), flat_dtype, c.world, counts, ts.t.data(), n, scale, in.ConsumeBool())
            : FuzzChunkCat(ts.t.data(), n, c.world, counts, flat.get(), flat_dtype, scale);
  FUZZ_EXPECT(!(huge && r == weftSuccess), "a huge count or world accepted by %s",
              split ? "weftChunkSplit" : "weftChunkCat");
}

void Norm(Input& in) {
  Tensors ts = MakeTensors(in, std::max(0, N(in)));
  std::vector<float> norms(ts.t.size() + 1);
  float total = 0;
  const weftResult_t r = weftL2Norm(ts.t.data(), static_cast<int>(ts.t.size()),
                                    in.ConsumeBool() ? norms.data() : nullptr, &total, nullptr);
  FUZZ_EXPECT(!(ts.huge && r == weftSuccess), "a huge count accepted by weftL2Norm");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: Flatten(in); break;
    case 1: Unflatten(in); break;
    case 2: ChunkCatSplit(in, false); break;
    case 3: ChunkCatSplit(in, true); break;
    default: Norm(in); break;
  }
  return 0;
}
