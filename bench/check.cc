#include "bench/check.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "bench/types.h"
#include "core/dtype.h"

namespace weft_bench {
namespace {

// splitmix64's finaliser: every input bit moves every output bit.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t RankBase(const Spec& s, int rank) { return Mix(s.seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(rank)); }

// The largest integer magnitude the type holds exactly (integer types wrap,
// which the reference reproduces, so any range is exact for them).
int64_t ExactLimit(weftDataType_t t) {
  switch (t) {
    case weftBfloat16: return 256;
    case weftFloat16: return 2048;
    case weftFloat32: return int64_t{1} << 24;
    case weftFloat64: return int64_t{1} << 53;
    default: return int64_t{1} << 62;
  }
}

// The value table of one rank: element i is Draw(h(i)).
struct Range {
  int64_t lo = 0;
  int64_t hi = 0;
  bool prod = false;  // draw from {1, -1, 2} (or {1, 2, 3} unsigned; {1, -1} if 2^n could overflow)
  bool prod_no_two = false;
};

Range RangeFor(const Spec& s) {
  Range r;
  const bool is_unsigned = s.type == weftUint8;
  if (s.op == weftProd) {
    r.prod = true;
    // float16 overflows past 2^15: with more ranks, products of {1, -1} only.
    r.prod_no_two = s.type == weftFloat16 && s.nranks > 15;
    return r;
  }
  int64_t m = 100;
  if (s.op == weftSum || s.op == weftAvg) m = std::clamp<int64_t>(ExactLimit(s.type) / std::max(1, s.nranks), 1, 64);
  r.lo = is_unsigned ? 0 : -m;
  r.hi = m;
  return r;
}

int64_t Draw(uint64_t h, const Range& r, bool is_unsigned) {
  if (r.prod) {
    if (is_unsigned) return 1 + static_cast<int64_t>(h % 3);
    if (r.prod_no_two) return (h & 1) ? 1 : -1;
    static constexpr int64_t kProd[3] = {1, -1, 2};
    return kProd[h % 3];
  }
  return r.lo + static_cast<int64_t>(h % static_cast<uint64_t>(r.hi - r.lo + 1));
}

void StoreInt(void* buf, size_t i, weftDataType_t t, int64_t v) {
  switch (t) {
    case weftInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case weftUint8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case weftInt16: static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case weftInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case weftInt64: static_cast<int64_t*>(buf)[i] = v; break;
    default: break;
  }
}

// `v` rounded once to the type, as weft's documented reductions round.
void StoreFloat(void* buf, size_t i, weftDataType_t t, double v) {
  switch (t) {
    case weftFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case weftFloat64: static_cast<double*>(buf)[i] = v; break;
    case weftFloat16: static_cast<uint16_t*>(buf)[i] = weft::DoubleToHalf(v); break;
    case weftBfloat16: static_cast<uint16_t*>(buf)[i] = weft::DoubleToBf16(v); break;
    default: break;
  }
}

void Store(void* buf, size_t i, weftDataType_t t, int64_t v) {
  if (IsFloat(t)) {
    StoreFloat(buf, i, t, static_cast<double>(v));
  } else {
    StoreInt(buf, i, t, v);
  }
}

// Wrapping: integer sums and products of many ranks may overflow on purpose.
int64_t WrapAdd(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t WrapMul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

}  // namespace

void FillInput(void* buf, size_t count, size_t offset, int rank, const Spec& s) {
  const Range r = RangeFor(s);
  const bool is_unsigned = s.type == weftUint8;
  const uint64_t base = RankBase(s, rank);
  for (size_t i = 0; i < count; ++i) Store(buf, i, s.type, Draw(Mix(base + offset + i), r, is_unsigned));
}

void FillReduced(void* buf, size_t count, size_t offset, const Spec& s) {
  const Range r = RangeFor(s);
  const bool is_unsigned = s.type == weftUint8;
  std::vector<uint64_t> bases(static_cast<size_t>(s.nranks));
  for (int k = 0; k < s.nranks; ++k) bases[static_cast<size_t>(k)] = RankBase(s, k);
  for (size_t i = 0; i < count; ++i) {
    int64_t acc = Draw(Mix(bases[0] + offset + i), r, is_unsigned);
    for (size_t k = 1; k < bases.size(); ++k) {
      const int64_t v = Draw(Mix(bases[k] + offset + i), r, is_unsigned);
      switch (s.op) {
        case weftSum: case weftAvg: acc = WrapAdd(acc, v); break;
        case weftProd: acc = WrapMul(acc, v); break;
        case weftMax: acc = std::max(acc, v); break;
        case weftMin: acc = std::min(acc, v); break;
        default: break;
      }
    }
    if (s.op != weftAvg) {
      Store(buf, i, s.type, acc);
    } else if (IsFloat(s.type)) {
      StoreFloat(buf, i, s.type, static_cast<double>(acc) / s.nranks);  // acc is exact: |acc| < 2^53
    } else {
      StoreInt(buf, i, s.type, acc / s.nranks);  // C++ truncates toward zero, as weft documents
    }
  }
}

void Poison(void* buf, const void* expected, size_t bytes) {
  auto* out = static_cast<unsigned char*>(buf);
  const auto* in = static_cast<const unsigned char*>(expected);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(~in[i]);
}

Mismatch Compare(const void* got, const void* want, size_t count, size_t es) {
  Mismatch m;
  if (count == 0 || std::memcmp(got, want, count * es) == 0) return m;
  const auto* g = static_cast<const unsigned char*>(got);
  const auto* w = static_cast<const unsigned char*>(want);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(g + i * es, w + i * es, es) == 0) continue;
    if (m.wrong++ == 0) {
      m.first = i;
      std::memcpy(&m.got, g + i * es, es);
      std::memcpy(&m.want, w + i * es, es);
    }
  }
  return m;
}

void PrepareCheck(Collective c, bool in_place, const Layout& l, const Spec& s, int rank, int root,
                  const CheckBuffers& b, unsigned char** got, size_t* count) {
  const size_t es = TypeSize(s.type);
  const size_t block = l.count * es;  // one rank's block, for reduce_scatter and all_gather
  *got = b.recv;
  *count = l.count;
  switch (c) {
    case Collective::kAllReduce:
      FillReduced(b.expected, l.count, 0, s);
      FillInput(in_place ? b.recv : b.send, l.count, 0, rank, s);
      if (!in_place) Poison(b.recv, b.expected, l.count * es);
      break;
    case Collective::kReduceScatter:
      // Rank r receives block r of the reduced nranks-block vector.
      FillReduced(b.expected, l.count, static_cast<size_t>(rank) * l.count, s);
      FillInput(in_place ? b.recv : b.send, l.send_count, 0, rank, s);
      if (in_place) {
        *got = b.recv + static_cast<size_t>(rank) * block;
      } else {
        Poison(b.recv, b.expected, block);
      }
      break;
    case Collective::kAllGather:
      // Block j of the result is rank j's input.
      *count = l.recv_count;
      for (int j = 0; j < s.nranks; ++j) FillInput(b.expected + static_cast<size_t>(j) * block, l.count, 0, j, s);
      Poison(b.recv, b.expected, l.recv_count * es);
      FillInput(in_place ? b.recv + static_cast<size_t>(rank) * block : b.send, l.count, 0, rank, s);
      break;
    case Collective::kBroadcast:
      FillInput(b.expected, l.count, 0, root, s);
      Poison(b.recv, b.expected, l.count * es);
      if (rank == root) FillInput(in_place ? b.recv : b.send, l.count, 0, rank, s);
      break;
    case Collective::kReduce:  // only root's recvbuf is written
      FillInput(in_place ? b.recv : b.send, l.count, 0, rank, s);
      if (rank != root) {
        *count = 0;
        break;
      }
      FillReduced(b.expected, l.count, 0, s);
      if (!in_place) Poison(b.recv, b.expected, l.count * es);
      break;
    case Collective::kGather:
      if (rank == root) {
        *count = l.recv_count;
        for (int j = 0; j < s.nranks; ++j) FillInput(b.expected + static_cast<size_t>(j) * block, l.count, 0, j, s);
        Poison(b.recv, b.expected, l.recv_count * es);
      } else {
        *count = 0;
      }
      FillInput(in_place ? b.recv + static_cast<size_t>(rank) * block : b.send, l.count, 0, rank, s);
      break;
    case Collective::kScatter:
      // Rank r receives block r of root's nranks-block input.
      FillInput(b.expected, l.count, static_cast<size_t>(rank) * l.count, root, s);
      // In place every rank's recvbuf is its slot of recvbuf (CallBuffers), as for reduce_scatter.
      if (rank == root) FillInput(in_place ? b.recv : b.send, l.send_count, 0, rank, s);
      if (in_place) *got = b.recv + static_cast<size_t>(rank) * block;
      if (!(in_place && rank == root)) Poison(*got, b.expected, block);
      break;
    case Collective::kAllToAll:
      // Block j of the result is block `rank` of rank j's input.
      *count = l.recv_count;
      for (int j = 0; j < s.nranks; ++j) {
        FillInput(b.expected + static_cast<size_t>(j) * block, l.count, static_cast<size_t>(rank) * l.count, j, s);
      }
      Poison(b.recv, b.expected, l.recv_count * es);
      FillInput(b.send, l.send_count, 0, rank, s);
      break;
    case Collective::kSendRecv:
      FillInput(b.expected, l.count, 0, (rank - 1 + s.nranks) % s.nranks, s);
      FillInput(in_place ? b.recv : b.send, l.count, 0, rank, s);
      if (!in_place) Poison(b.recv, b.expected, l.count * es);
      break;
  }
}

}  // namespace weft_bench
