#include "bench/check/pattern.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/dtype.h"

namespace weft_check {

namespace {

constexpr const char* kCollNames[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
                                      "gather",     "scatter",        "all_to_all", "send_recv"};
constexpr weftDataType_t kTypes[] = {weftFloat32, weftFloat16, weftBfloat16, weftFloat64, weftInt8,
                                     weftUint8,   weftInt16,   weftInt32,    weftInt64};
constexpr weftRedOp_t kOps[] = {weftSum, weftProd, weftMax, weftMin, weftAvg};

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The largest integer M such that every integer in [0, M] is exact in `t`
// (and no sum up to M overflows it). uint8 stops at 254: 255 is the poison
// the outputs are filled with. int64 stops where the checker's doubles do.
double Exact(weftDataType_t t) {
  switch (t) {
    case weftFloat32: return 16777216.0;
    case weftFloat16: return 2048.0;
    case weftBfloat16: return 256.0;
    case weftFloat64:
    case weftInt64: return 9007199254740992.0;
    case weftInt8: return 127.0;
    case weftUint8: return 254.0;
    case weftInt16: return 32767.0;
    case weftInt32: return 2147483647.0;
    default: return 0;
  }
}

// Ranks with a bit of their own for a sum (avg: `scale` = n) of n ranks:
// the most, up to 53, whose every-bit-set total stays exact; 0 if even one
// shared bit overflows.
int SumBits(weftDataType_t t, int n, double scale) {
  for (int b = std::min(n, 53); b >= 1; --b) {
    double total = 0;
    for (int r = 0; r < n; ++r) total += scale * std::ldexp(1.0, r % b);
    if (total <= Exact(t)) return b;
  }
  return 0;
}

double Load(const void* p, size_t j, weftDataType_t t) {
  const auto* b = static_cast<const unsigned char*>(p) + j * TypeSize(t);
  switch (t) {
    case weftFloat32: { float v; std::memcpy(&v, b, 4); return v; }
    case weftFloat64: { double v; std::memcpy(&v, b, 8); return v; }
    case weftFloat16: { uint16_t v; std::memcpy(&v, b, 2); return weft::HalfToFloat(v); }
    case weftBfloat16: { uint16_t v; std::memcpy(&v, b, 2); return weft::Bf16ToFloat(v); }
    case weftInt8: { int8_t v; std::memcpy(&v, b, 1); return v; }
    case weftUint8: { uint8_t v; std::memcpy(&v, b, 1); return v; }
    case weftInt16: { int16_t v; std::memcpy(&v, b, 2); return v; }
    case weftInt32: { int32_t v; std::memcpy(&v, b, 4); return v; }
    case weftInt64: { int64_t v; std::memcpy(&v, b, 8); return static_cast<double>(v); }
    default: return 0;
  }
}

template <typename T>
void Put(unsigned char* b, T v) {
  std::memcpy(b, &v, sizeof(T));
}

void Store(void* p, size_t j, weftDataType_t t, double v) {
  auto* b = static_cast<unsigned char*>(p) + j * TypeSize(t);
  switch (t) {
    case weftFloat32: return Put(b, static_cast<float>(v));
    case weftFloat64: return Put(b, v);
    case weftFloat16: return Put(b, weft::DoubleToHalf(v));
    case weftBfloat16: return Put(b, weft::DoubleToBf16(v));
    case weftInt8: return Put(b, static_cast<int8_t>(v));
    case weftUint8: return Put(b, static_cast<uint8_t>(v));
    case weftInt16: return Put(b, static_cast<int16_t>(v));
    case weftInt32: return Put(b, static_cast<int32_t>(v));
    case weftInt64: return Put(b, static_cast<int64_t>(v));
    default: return;
  }
}

}  // namespace

const char* Name(Coll c) { return kCollNames[static_cast<int>(c)]; }

bool Reduces(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce; }

bool CollNamed(const std::string& name, Coll* c) {
  for (Coll k : kColls) {
    if (name == Name(k)) {
      *c = k;
      return true;
    }
  }
  return false;
}

const char* TypeName(weftDataType_t t) {
  // Indexed by weftDataType_t's values (int16 was appended after int64).
  static constexpr const char* kNames[] = {"float32", "float16", "bfloat16", "float64", "int8",
                                           "uint8",   "int32",   "int64",    "int16"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == weftNumTypes, "a name for every weftDataType_t");
  return t >= 0 && t < weftNumTypes ? kNames[t] : "invalid";
}

const char* OpName(weftRedOp_t op) {
  static constexpr const char* kNames[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < weftNumOps ? kNames[op] : "invalid";
}

size_t TypeSize(weftDataType_t t) {
  switch (t) {
    case weftFloat16:
    case weftBfloat16:
    case weftInt16: return 2;
    case weftFloat64:
    case weftInt64: return 8;
    case weftInt8:
    case weftUint8: return 1;
    default: return 4;
  }
}

Case Primary(Coll c, int nranks) {
  // float32 holds sums of 24 distinct powers of two exactly.
  return Case{c, Reduces(c) && nranks > 24 ? weftFloat64 : weftFloat32, weftSum};
}

std::vector<Case> Matrix(Coll c, int nranks) {
  std::vector<Case> out;
  for (weftDataType_t t : kTypes) {
    if (!Reduces(c)) {
      out.push_back({c, t, weftSum});
      continue;
    }
    for (weftRedOp_t op : kOps) {
      if (op == weftSum && SumBits(t, nranks, 1) == 0) continue;
      if (op == weftAvg && SumBits(t, nranks, nranks) == 0) continue;
      out.push_back({c, t, op});
    }
  }
  return out;
}

Pattern::Pattern(Case k, int nranks, uint64_t seed, size_t count)
    : k_(k), nranks_(nranks), seed_(seed), count_(count), bits_(0), scale_(1), range_(0) {
  const double exact = Exact(k.dtype);
  if (!Reduces(k.coll)) {
    range_ = std::min(exact, 16777216.0);
  } else if (k.op == weftSum || k.op == weftAvg) {
    scale_ = k.op == weftAvg ? nranks : 1;
    bits_ = std::max(1, SumBits(k.dtype, nranks, scale_));
  } else if (k.op == weftProd) {
    while (bits_ < std::min(nranks, 53) && std::ldexp(1.0, bits_ + 1) <= exact) ++bits_;
  } else {
    range_ = std::min(exact, 65536.0);
  }
}

// A block per rank: what reduce_scatter, scatter and all_to_all send, and
// what all_gather, gather and all_to_all receive.
size_t Pattern::send_count() const {
  const Coll c = k_.coll;
  return c == Coll::kReduceScatter || c == Coll::kScatter || c == Coll::kAllToAll ? count_ * nranks_ : count_;
}

size_t Pattern::recv_count() const {
  const Coll c = k_.coll;
  return c == Coll::kAllGather || c == Coll::kGather || c == Coll::kAllToAll ? count_ * nranks_ : count_;
}

bool Pattern::Receives(int rank, int iter) const {
  return (k_.coll != Coll::kReduce && k_.coll != Coll::kGather) || rank == root(iter);
}

uint64_t Pattern::Mask(size_t element, int iter) const {
  return Mix(seed_ ^ Mix(static_cast<uint64_t>(element) * 1315423911u + static_cast<uint64_t>(iter)));
}

double Pattern::Value(int rank, size_t element, int iter) const { return ValueOf(rank, Mask(element, iter)); }

double Pattern::ValueOf(int rank, uint64_t m) const {
  if (range_ > 0) {  // max, min, the data movers
    const uint64_t v = Mix(m ^ (static_cast<uint64_t>(rank) * 0x9e3779b97f4a7c15ull));
    return static_cast<double>(v % static_cast<uint64_t>(range_));
  }
  if (k_.op == weftProd) return rank < bits_ && (m >> rank & 1) ? 2.0 : 1.0;
  const int b = rank % bits_;
  return (m >> b & 1) ? scale_ * std::ldexp(1.0, b) : 0.0;
}

int Pattern::Sender(int rank, size_t j, int iter) const {
  switch (k_.coll) {
    case Coll::kAllGather:
    case Coll::kGather:
    case Coll::kAllToAll: return static_cast<int>(j / count_);
    case Coll::kBroadcast:
    case Coll::kScatter: return root(iter);
    case Coll::kSendRecv: return (rank - shift(iter) + nranks_) % nranks_;
    default: return -1;
  }
}

size_t Pattern::Source(int rank, size_t j) const {
  switch (k_.coll) {
    case Coll::kScatter: return static_cast<size_t>(rank) * count_ + j;
    case Coll::kAllToAll: return static_cast<size_t>(rank) * count_ + j % count_;
    default: return j;
  }
}

// Send element j is element `offset + j` of the logical vector: the
// gathers' rank's own block, everyone else's whole buffer.
void Pattern::Fill(void* send, int rank, int iter) const {
  const bool block = k_.coll == Coll::kAllGather || k_.coll == Coll::kGather;
  const size_t offset = block ? static_cast<size_t>(rank) * count_ : 0;
  for (size_t j = 0; j < send_count(); ++j) Store(send, j, k_.dtype, Value(rank, offset + j, iter));
}

double Pattern::Expected(int rank, size_t j, int iter) const {
  if (!Reduces(k_.coll)) return Value(Sender(rank, j, iter), Source(rank, j), iter);
  const size_t e = k_.coll == Coll::kReduceScatter ? static_cast<size_t>(rank) * count_ + j : j;
  const uint64_t m = Mask(e, iter);  // once: every rank's value comes from it
  double acc = ValueOf(0, m);
  for (int r = 1; r < nranks_; ++r) {
    const double v = ValueOf(r, m);
    switch (k_.op) {
      case weftProd: acc *= v; break;
      case weftMax: acc = std::max(acc, v); break;
      case weftMin: acc = std::min(acc, v); break;
      default: acc += v;
    }
  }
  return k_.op == weftAvg ? acc / nranks_ : acc;  // exact: every input is a multiple of n
}

bool Pattern::Contributes(int r, int rank, size_t j, int iter) const {
  if (!Reduces(k_.coll)) return r == Sender(rank, j, iter);
  if (k_.op != weftSum && k_.op != weftAvg) return true;
  const size_t e = k_.coll == Coll::kReduceScatter ? static_cast<size_t>(rank) * count_ + j : j;
  return Value(r, e, iter) != 0;
}

Verdict Pattern::Check(const void* recv, int rank, int iter) const {
  Verdict v;
  v.suspects.assign(nranks_, false);
  if (!Receives(rank, iter)) return v;
  v.suspects.assign(nranks_, true);
  const size_t n = recv_count();
  for (size_t j = 0; j < n; ++j) {
    const double want = Expected(rank, j, iter);
    const double got = Load(recv, j, k_.dtype);
    if (got == want && std::signbit(got) == std::signbit(want)) continue;
    if (v.wrong++ == 0) v.first = absl::StrFormat("element %zu: got %.17g want %.17g", j, got, want);
    for (int r = 0; r < nranks_; ++r) {
      if (v.suspects[r] && !Contributes(r, rank, j, iter)) v.suspects[r] = false;
    }
  }
  if (v.wrong == 0) v.suspects.assign(nranks_, false);
  return v;
}

}  // namespace weft_check
