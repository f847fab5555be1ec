#include "tests/common/collective_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/common/poison.h"

namespace weft {
namespace testing {
namespace {

constexpr size_t kGuardBytes = 64;
constexpr int kMaxReported = 3;

// A scalar of any weft type: floats as the double they widen to exactly,
// integers as int64.
struct Value {
  double f = 0;
  int64_t i = 0;
};

double RoundTo(DataType t, double v) {
  switch (t) {
    case DataType::kFloat32: return static_cast<float>(v);
    case DataType::kFloat16: return HalfToFloat(DoubleToHalf(v));
    case DataType::kBfloat16: return Bf16ToFloat(DoubleToBf16(v));
    default: return v;
  }
}

int64_t WrapTo(DataType t, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  switch (t) {
    case DataType::kInt8: return static_cast<int8_t>(u);
    case DataType::kUint8: return static_cast<uint8_t>(u);
    case DataType::kInt16: return static_cast<int16_t>(u);
    case DataType::kInt32: return static_cast<int32_t>(u);
    default: return v;
  }
}

// The input element `i` of rank `rank` for case `c`: never zero.
Value Input(const Case& c, uint64_t seed, int rank, size_t i) {
  const uint64_t u = Mix(seed ^ (static_cast<uint64_t>(rank) << 56) ^ (i * 0x2545f4914f6cdd1dull));
  Value v;
  if (!IsFloating(c.t)) {
    v.i = WrapTo(c.t, static_cast<int64_t>(u));
    if (v.i == 0) v.i = 1;
    return v;
  }
  const double sign = (u & 1) ? -1.0 : 1.0;
  if (c.inputs == Inputs::kExact) {
    // Powers of two multiply exactly; small integers add exactly.
    static constexpr double kPowers[] = {0.5, 1.0, 2.0};
    v.f = c.op == RedOp::kProd ? sign * kPowers[(u >> 1) % 3] : sign * static_cast<double>(1 + (u >> 1) % 8);
  } else {
    const double unit = static_cast<double>(u >> 11) * 0x1p-53;  // [0, 1)
    v.f = c.op == RedOp::kProd ? sign * (0.5 + 1.5 * unit) : sign * (1e-3 + unit);
  }
  v.f = RoundTo(c.t, v.f);
  return v;
}

void Store(DataType t, void* base, size_t i, const Value& v) {
  auto* p = static_cast<unsigned char*>(base) + i * ElementSize(t);
  switch (t) {
    case DataType::kFloat32: { const float x = static_cast<float>(v.f); std::memcpy(p, &x, 4); break; }
    case DataType::kFloat16: { const uint16_t x = DoubleToHalf(v.f); std::memcpy(p, &x, 2); break; }
    case DataType::kBfloat16: { const uint16_t x = DoubleToBf16(v.f); std::memcpy(p, &x, 2); break; }
    case DataType::kFloat64: std::memcpy(p, &v.f, 8); break;
    case DataType::kInt8: case DataType::kUint8: { const auto x = static_cast<uint8_t>(v.i); *p = x; break; }
    case DataType::kInt16: { const auto x = static_cast<int16_t>(v.i); std::memcpy(p, &x, 2); break; }
    case DataType::kInt32: { const auto x = static_cast<int32_t>(v.i); std::memcpy(p, &x, 4); break; }
    case DataType::kInt64: std::memcpy(p, &v.i, 8); break;
  }
}

Value Load(DataType t, const void* base, size_t i) {
  const auto* p = static_cast<const unsigned char*>(base) + i * ElementSize(t);
  Value v;
  switch (t) {
    case DataType::kFloat32: { float x; std::memcpy(&x, p, 4); v.f = x; break; }
    case DataType::kFloat16: { uint16_t x; std::memcpy(&x, p, 2); v.f = HalfToFloat(x); break; }
    case DataType::kBfloat16: { uint16_t x; std::memcpy(&x, p, 2); v.f = Bf16ToFloat(x); break; }
    case DataType::kFloat64: std::memcpy(&v.f, p, 8); break;
    case DataType::kInt8: v.i = static_cast<int8_t>(*p); break;
    case DataType::kUint8: v.i = *p; break;
    case DataType::kInt16: { int16_t x; std::memcpy(&x, p, 2); v.i = x; break; }
    case DataType::kInt32: { int32_t x; std::memcpy(&x, p, 4); v.i = x; break; }
    case DataType::kInt64: std::memcpy(&v.i, p, 8); break;
  }
  return v;
}

int MantissaBits(DataType t) {
  switch (t) {
    case DataType::kFloat16: return 10;
    case DataType::kBfloat16: return 7;
    case DataType::kFloat32: return 23;
    default: return 52;
  }
}

// The spacing of type t's values near |v| (its ulp), at least its smallest subnormal.
double Ulp(DataType t, double v) {
  int e = 0;
  std::frexp(v, &e);
  const int min_exp = t == DataType::kFloat16 ? -24 : t == DataType::kBfloat16 ? -133
                      : t == DataType::kFloat32 ? -149 : -1074;
  return std::ldexp(1.0, std::max(e - 1 - MantissaBits(t), min_exp));
}

// Expected value of one reduced element, and the error allowed for it.
struct Expect {
  Value v;
  double tol = 0;
};

Expect Reduce(const Case& c, uint64_t seed, int nranks, size_t i) {
  Expect e;
  if (!IsFloating(c.t)) {
    uint64_t acc = static_cast<uint64_t>(Input(c, seed, 0, i).i);
    for (int q = 1; q < nranks; ++q) {
      const int64_t x = Input(c, seed, q, i).i;
      const auto a = static_cast<int64_t>(acc);
      switch (c.op) {
        case RedOp::kSum: case RedOp::kAvg: acc += static_cast<uint64_t>(x); break;
        case RedOp::kProd: acc *= static_cast<uint64_t>(x); break;
        case RedOp::kMax: acc = static_cast<uint64_t>(std::max(a, x)); break;
        case RedOp::kMin: acc = static_cast<uint64_t>(std::min(a, x)); break;
      }
    }
    auto r = static_cast<int64_t>(acc);
    if (c.op == RedOp::kAvg) r /= nranks;
    e.v.i = WrapTo(c.t, r);
    return e;
  }
  // In long double (64 significant bits on x86, more elsewhere): the tolerance
  // below counts the backend's roundings only, so the reference must hold
  // float64 sums, products and quotients more precisely than float64 itself.
  long double acc = Input(c, seed, 0, i).f, mag = std::fabs(acc);
  for (int q = 1; q < nranks; ++q) {
    const long double x = Input(c, seed, q, i).f;
    mag += std::fabs(x);
    switch (c.op) {
      case RedOp::kSum: case RedOp::kAvg: acc += x; break;
      case RedOp::kProd: acc *= x; break;
      case RedOp::kMax: acc = std::max(acc, x); break;
      case RedOp::kMin: acc = std::min(acc, x); break;
    }
  }
  if (c.op == RedOp::kAvg) {
    acc /= nranks;
    mag /= nranks;
  }
  e.v.f = RoundTo(c.t, static_cast<double>(acc));
  if (c.op == RedOp::kMax || c.op == RedOp::kMin) return e;  // a selection: exact
  const bool half = IsHalf(c.t);
  if (c.inputs == Inputs::kExact) {
    // Exact partial sums and products; only avg's division rounds, and the
    // half types round its float32 quotient once more.
    if (half && c.op == RedOp::kAvg) e.tol = Ulp(c.t, static_cast<double>(acc));
    return e;
  }
  // Real inputs: each of the N-1 combining steps rounds in the accumulation
  // type (relative 2^-24 for float32 and the half types, 2^-53 for float64),
  // then the result rounds once to the element type.
  const double eps = c.t == DataType::kFloat64 ? 0x1p-53 : 0x1p-24;
  const double scale = static_cast<double>(c.op == RedOp::kProd ? std::fabs(acc) : mag);
  e.tol = (nranks - 1) * eps * scale * 1.01 + Ulp(c.t, static_cast<double>(acc));
  return e;
}

// Expected output element j on this rank.
Expect Expected(const Case& c, uint64_t seed, int nranks, int rank, size_t j) {
  switch (c.coll) {
    case Coll::kAllReduce: return Reduce(c, seed, nranks, j);
    case Coll::kReduceScatter: return Reduce(c, seed, nranks, static_cast<size_t>(rank) * c.count + j);
    case Coll::kAllGather:
      return {Input(c, seed, static_cast<int>(j / c.count), j % c.count), 0};
    case Coll::kBroadcast: return {Input(c, seed, c.root, j), 0};
    case Coll::kReduce: return Reduce(c, seed, nranks, j);
    case Coll::kGather: return {Input(c, seed, static_cast<int>(j / c.count), j % c.count), 0};
    case Coll::kScatter: return {Input(c, seed, c.root, static_cast<size_t>(rank) * c.count + j), 0};
    case Coll::kAllToAll:
      return {Input(c, seed, static_cast<int>(j / c.count), static_cast<size_t>(rank) * c.count + j % c.count), 0};
  }
  return {};
}

std::string Show(DataType t, const Value& v) {
  return IsFloating(t) ? absl::StrFormat("%.9g", v.f) : absl::StrCat(v.i);
}

bool Matches(DataType t, const Value& got, const Expect& e) {
  if (!IsFloating(t)) return got.i == e.v.i;
  if (e.tol == 0) return got.f == e.v.f;  // NaN (poison) never matches
  return std::fabs(got.f - e.v.f) <= e.tol;
}

uint64_t Hash(const void* p, size_t bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// The big count's subset (see MatrixCases).
bool BigSubset(Coll coll, DataType t, RedOp op, Inputs inputs) {
  // The rooted and personalised collectives add their block layouts, not
  // new arithmetic: one type each at the big count (reduce: two).
  if (coll == Coll::kReduce) {
    return inputs == Inputs::kExact && ((t == DataType::kFloat32 && op == RedOp::kSum) ||
                                        (t == DataType::kBfloat16 && op == RedOp::kAvg));
  }
  if (coll == Coll::kGather || coll == Coll::kScatter || coll == Coll::kAllToAll) return t == DataType::kFloat16;
  if (!Reduces(coll)) return t == DataType::kFloat16 || t == DataType::kFloat64;
  if (inputs == Inputs::kReal) return t == DataType::kFloat32 && op == RedOp::kSum;
  return (t == DataType::kFloat32 && op == RedOp::kSum) || (t == DataType::kBfloat16 && op == RedOp::kAvg) ||
         (t == DataType::kInt8 && op == RedOp::kAvg) || (t == DataType::kFloat64 && op == RedOp::kProd) ||
         (t == DataType::kInt32 && op == RedOp::kMax);
}

void AddCases(int world_size, const std::vector<size_t>& counts, bool subset, std::vector<Case>* out) {
  for (Coll coll : {Coll::kAllReduce, Coll::kReduceScatter, Coll::kAllGather, Coll::kBroadcast, Coll::kReduce,
                    Coll::kGather, Coll::kScatter, Coll::kAllToAll}) {
    for (int ti = 0; ti < kNumDataTypes; ++ti) {
      const auto t = static_cast<DataType>(ti);
      for (int oi = 0; oi < (Reduces(coll) ? kNumRedOps : 1); ++oi) {
        const auto op = static_cast<RedOp>(oi);
        for (size_t count : counts) {
          for (bool in_place : {false, true}) {
            if (in_place && coll == Coll::kAllToAll) continue;  // never in place
            Case c{coll, t, op, count, in_place, static_cast<int>((count + static_cast<size_t>(ti)) % world_size),
                   Inputs::kExact};
            const bool arithmetic = op == RedOp::kSum || op == RedOp::kAvg || op == RedOp::kProd;
            for (Inputs inputs : {Inputs::kExact, Inputs::kReal}) {
              if (inputs == Inputs::kReal && !(IsFloating(t) && Reduces(coll) && arithmetic)) continue;
              if (subset && count == kBigCount && !BigSubset(coll, t, op, inputs)) continue;
              c.inputs = inputs;
              out->push_back(c);
            }
          }
        }
      }
    }
  }
}

}  // namespace

const char* Name(Coll c) {
  switch (c) {
    case Coll::kAllReduce: return "all_reduce";
    case Coll::kReduceScatter: return "reduce_scatter";
    case Coll::kAllGather: return "all_gather";
    case Coll::kBroadcast: return "broadcast";
    case Coll::kReduce: return "reduce";
    case Coll::kGather: return "gather";
    case Coll::kScatter: return "scatter";
    case Coll::kAllToAll: return "all_to_all";
  }
  return "?";
}

std::string Case::Describe() const {
  std::string s = absl::StrCat(Name(coll), " ", weft::Name(t));
  if (Reduces(coll)) absl::StrAppend(&s, " ", weft::Name(op));
  absl::StrAppend(&s, " count=", count, in_place ? " in-place" : " out-of-place",
                  inputs == Inputs::kExact ? " exact" : " real");
  if (HasRoot(coll)) absl::StrAppend(&s, " root=", root);
  return s;
}

std::vector<Case> MatrixCases(int world_size) {
  std::vector<Case> v;
  AddCases(world_size, std::vector<size_t>(std::begin(kCounts), std::end(kCounts)), true, &v);
  return v;
}

std::vector<Case> CasesAtCounts(int world_size, const std::vector<size_t>& counts) {
  std::vector<Case> v;
  AddCases(world_size, counts, false, &v);
  return v;
}

std::string CheckSameOnAllRanks(Communicator& comm, uint64_t h, const std::string& what) {
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()), 0);
  const absl::Status s = comm.AllGather(&h, all.data(), 1, DataType::kInt64, nullptr);
  if (!s.ok()) return absl::StrCat(what, ": all-gathering result hashes failed: ", s.ToString());
  for (int q = 0; q < comm.size(); ++q) {
    if (all[static_cast<size_t>(q)] != all[0]) {
      return absl::StrFormat("%s: rank %d's result differs from rank 0's (hash %016x vs %016x): not bit-identical",
                             what, q, all[static_cast<size_t>(q)], all[0]);
    }
  }
  return "";
}

std::string CheckCase(Communicator& comm, const Case& c, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  const size_t es = ElementSize(c.t), nn = static_cast<size_t>(n), rr = static_cast<size_t>(r);
  const std::string what = absl::StrCat(c.Describe(), " on rank ", r, " of ", n);
  const bool at_root = r == c.root;
  size_t in_elems = c.count, out_elems = c.count;
  if (c.coll == Coll::kReduceScatter || c.coll == Coll::kAllToAll || (c.coll == Coll::kScatter && at_root)) {
    in_elems *= nn;
  }
  if (c.coll == Coll::kAllGather || c.coll == Coll::kAllToAll || (c.coll == Coll::kGather && at_root)) out_elems *= nn;
  // Reduce and gather write only root's recvbuf; elsewhere it is NULL.
  const bool has_output = !((c.coll == Coll::kReduce || c.coll == Coll::kGather) && !at_root);
  if (!has_output) out_elems = 0;
  const bool has_input = !((c.coll == Coll::kBroadcast || c.coll == Coll::kScatter) && !at_root);
  if (!has_input) in_elems = 0;
  // Out of place: `in` and `out`. In place: one buffer, `out` inside it.
  std::vector<unsigned char> in(in_elems * es), big;
  for (size_t i = 0; i < in_elems; ++i) Store(c.t, in.data(), i, Input(c, seed, r, i));
  const void* send = in.data();
  unsigned char* out;
  size_t out_offset = 0;  // elements from the start of `big` to the output
  // Only root has anything to do in place for the rooted collectives.
  const bool in_place = c.in_place && (!HasRoot(c.coll) || c.coll == Coll::kBroadcast || at_root);
  if (!in_place) {
    big.assign(out_elems * es + kGuardBytes, kPoison);
    out = big.data();
    if (!has_input) send = nullptr;  // a non-root's sendbuf is never read
  } else {
    big.assign(std::max(in_elems, out_elems) * es + kGuardBytes, kPoison);
    switch (c.coll) {
      case Coll::kAllReduce: case Coll::kBroadcast: case Coll::kReduce:
        if (has_input && !in.empty()) std::memcpy(big.data(), in.data(), in.size());
        break;
      case Coll::kReduceScatter: case Coll::kScatter:
        if (!in.empty()) std::memcpy(big.data(), in.data(), in.size());
        out_offset = rr * c.count;
        break;
      case Coll::kAllGather: case Coll::kGather:
        if (!in.empty()) std::memcpy(big.data() + rr * c.count * es, in.data(), in.size());
        break;
      case Coll::kAllToAll: break;  // never in place
    }
    out = big.data() + out_offset * es;
    send = c.coll == Coll::kAllGather || c.coll == Coll::kGather ? big.data() + rr * c.count * es : big.data();
  }
  void* recv = (c.coll == Coll::kAllGather || c.coll == Coll::kGather) && in_place ? big.data() : out;
  if (!has_output) recv = nullptr;
  absl::Status s;
  switch (c.coll) {
    case Coll::kAllReduce: s = comm.AllReduce(send, recv, c.count, c.t, c.op, nullptr); break;
    case Coll::kReduceScatter: s = comm.ReduceScatter(send, recv, c.count, c.t, c.op, nullptr); break;
    case Coll::kAllGather: s = comm.AllGather(send, recv, c.count, c.t, nullptr); break;
    case Coll::kBroadcast: s = comm.Broadcast(send, recv, c.count, c.t, c.root, nullptr); break;
    case Coll::kReduce: s = comm.Reduce(send, recv, c.count, c.t, c.op, c.root, nullptr); break;
    case Coll::kGather: s = comm.Gather(send, recv, c.count, c.t, c.root, nullptr); break;
    case Coll::kScatter: s = comm.Scatter(send, recv, c.count, c.t, c.root, nullptr); break;
    case Coll::kAllToAll: s = comm.AllToAll(send, recv, c.count, c.t, nullptr); break;
  }
  if (!s.ok()) return absl::StrCat(what, ": returned ", s.ToString());

  std::string err;
  int bad = 0;
  for (size_t j = 0; j < out_elems; ++j) {
    const Expect e = Expected(c, seed, n, r, j);
    const Value got = Load(c.t, out, j);
    if (Matches(c.t, got, e)) continue;
    if (++bad <= kMaxReported) {
      absl::StrAppend(&err, "\n  element ", j, " = ", Show(c.t, got), ", expected ", Show(c.t, e.v));
      if (e.tol > 0) absl::StrAppend(&err, absl::StrFormat(" +- %.3g", e.tol));
    }
  }
  if (bad > kMaxReported) absl::StrAppend(&err, "\n  ... ", bad, " of ", out_elems, " elements wrong");
  const size_t end = (in_place ? std::max(in_elems, out_elems) : out_elems) * es;
  for (size_t b = end; b < big.size(); ++b) {
    if (big[b] != kPoison) {
      absl::StrAppend(&err, "\n  wrote past the end of the buffer (byte ", b - end, " after it)");
      break;
    }
  }
  if (!in_place && has_input) {
    unsigned char want[8];
    for (size_t i = 0; i < in_elems; ++i) {
      Store(c.t, want, 0, Input(c, seed, r, i));
      if (std::memcmp(in.data() + i * es, want, es) != 0) {
        absl::StrAppend(&err, "\n  modified its input at element ", i);
        break;
      }
    }
  }
  // Outputs that should be the same on every rank must agree bit for bit.
  if (c.coll == Coll::kAllReduce || c.coll == Coll::kAllGather || c.coll == Coll::kBroadcast) {
    const std::string same = CheckSameOnAllRanks(comm, Hash(out, out_elems * es), what);
    if (!same.empty()) absl::StrAppend(&err, "\n  ", same);
  }
  return err.empty() ? "" : what + ":" + err;
}

}  // namespace testing
}  // namespace weft
