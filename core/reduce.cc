#include "core/reduce.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace weft {
namespace {

// Per-type widening/narrowing between the element type E and accumulator A.
template <typename E, typename A> inline A Widen(E v) { return static_cast<A>(v); }
template <typename E, typename A> inline E Narrow(A v) { return static_cast<E>(v); }

struct F16 { uint16_t bits; };
struct B16 { uint16_t bits; };
template <> inline float Widen<F16, float>(F16 v) { return HalfToFloat(v.bits); }
template <> inline F16 Narrow<F16, float>(float v) { return F16{FloatToHalf(v)}; }
template <> inline float Widen<B16, float>(B16 v) { return Bf16ToFloat(v.bits); }
template <> inline B16 Narrow<B16, float>(float v) { return B16{FloatToBf16(v)}; }
// Integers accumulate in int64 with wrapping sums and products.
template <> inline int8_t Narrow<int8_t, int64_t>(int64_t v) { return static_cast<int8_t>(static_cast<uint64_t>(v)); }
template <> inline uint8_t Narrow<uint8_t, int64_t>(int64_t v) { return static_cast<uint8_t>(static_cast<uint64_t>(v)); }
template <> inline int16_t Narrow<int16_t, int64_t>(int64_t v) { return static_cast<int16_t>(static_cast<uint64_t>(v)); }
template <> inline int32_t Narrow<int32_t, int64_t>(int64_t v) { return static_cast<int32_t>(static_cast<uint64_t>(v)); }

template <typename A> inline A Combine(RedOp op, A a, A b) {
  switch (op) {
    case RedOp::kSum: case RedOp::kAvg:
      if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      } else {
        return a + b;
      }
    case RedOp::kProd:
      if constexpr (std::is_integral_v<A>) {
        return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      } else {
        return a * b;
      }
    case RedOp::kMax: return std::max(a, b);
    case RedOp::kMin: return std::min(a, b);
  }
  return a;
}

// The op switch is hoisted out of the loop so each loop vectorises.
template <typename A, typename Load>
void CombineLoop(RedOp op, A* acc, size_t n, Load load) {
  switch (op) {
    case RedOp::kSum: case RedOp::kAvg:
      for (size_t i = 0; i < n; ++i) acc[i] = Combine(RedOp::kSum, acc[i], load(i));
      break;
    case RedOp::kProd:
      for (size_t i = 0; i < n; ++i) acc[i] = Combine(RedOp::kProd, acc[i], load(i));
      break;
    case RedOp::kMax:
      for (size_t i = 0; i < n; ++i) acc[i] = Combine(RedOp::kMax, acc[i], load(i));
      break;
    case RedOp::kMin:
      for (size_t i = 0; i < n; ++i) acc[i] = Combine(RedOp::kMin, acc[i], load(i));
      break;
  }
}

template <typename E, typename A>
struct Ops {
  static void ToAccum(const void* src, void* acc, size_t n) {
    const E* s = static_cast<const E*>(src);
    A* a = static_cast<A*>(acc);
    for (size_t i = 0; i < n; ++i) a[i] = Widen<E, A>(s[i]);
  }
  static void Combine2(RedOp op, const void* a, const void* b, void* acc, size_t n) {
    const E* x = static_cast<const E*>(a);
    const E* y = static_cast<const E*>(b);
    A* out = static_cast<A*>(acc);
    // Hoisted like CombineLoop's; `out` may alias x or y element for element.
    switch (op) {
      case RedOp::kSum: case RedOp::kAvg:
        for (size_t i = 0; i < n; ++i) out[i] = Combine(RedOp::kSum, Widen<E, A>(x[i]), Widen<E, A>(y[i]));
        break;
      case RedOp::kProd:
        for (size_t i = 0; i < n; ++i) out[i] = Combine(RedOp::kProd, Widen<E, A>(x[i]), Widen<E, A>(y[i]));
        break;
      case RedOp::kMax:
        for (size_t i = 0; i < n; ++i) out[i] = Combine(RedOp::kMax, Widen<E, A>(x[i]), Widen<E, A>(y[i]));
        break;
      case RedOp::kMin:
        for (size_t i = 0; i < n; ++i) out[i] = Combine(RedOp::kMin, Widen<E, A>(x[i]), Widen<E, A>(y[i]));
        break;
    }
  }
  static void Accumulate(RedOp op, void* acc, const void* src, size_t n) {
    const E* s = static_cast<const E*>(src);
    CombineLoop<A>(op, static_cast<A*>(acc), n, [s](size_t i) { return Widen<E, A>(s[i]); });
  }
  static void CombineAccum(RedOp op, void* acc, const void* other, size_t n) {
    const A* o = static_cast<const A*>(other);
    CombineLoop<A>(op, static_cast<A*>(acc), n, [o](size_t i) { return o[i]; });
  }
  static void FromAccum(RedOp op, int nranks, const void* acc, void* dst, size_t n) {
    const A* a = static_cast<const A*>(acc);
    E* d = static_cast<E*>(dst);
    if (op == RedOp::kAvg) {
      // Floating point divides (not multiplies by 1/N) so avg is the correctly rounded quotient.
      const A div = static_cast<A>(nranks);
      for (size_t i = 0; i < n; ++i) d[i] = Narrow<E, A>(a[i] / div);
    } else {
      for (size_t i = 0; i < n; ++i) d[i] = Narrow<E, A>(a[i]);
    }
  }
};

template <typename F>
void Dispatch(DataType t, F&& f) {
  switch (t) {
    case DataType::kFloat32: f(Ops<float, float>{}); break;
    case DataType::kFloat16: f(Ops<F16, float>{}); break;
    case DataType::kBfloat16: f(Ops<B16, float>{}); break;
    case DataType::kFloat64: f(Ops<double, double>{}); break;
    case DataType::kInt8: f(Ops<int8_t, int64_t>{}); break;
    case DataType::kUint8: f(Ops<uint8_t, int64_t>{}); break;
    case DataType::kInt32: f(Ops<int32_t, int64_t>{}); break;
    case DataType::kInt64: f(Ops<int64_t, int64_t>{}); break;
    case DataType::kInt16: f(Ops<int16_t, int64_t>{}); break;
  }
}

}  // namespace

DataType AccumType(DataType t) {
  switch (t) {
    case DataType::kFloat16: case DataType::kBfloat16: return DataType::kFloat32;
    case DataType::kInt8: case DataType::kUint8: case DataType::kInt16: case DataType::kInt32:
      return DataType::kInt64;
    default: return t;
  }
}

void ToAccum(DataType t, const void* src, void* acc, size_t n) {
  Dispatch(t, [&](auto ops) { ops.ToAccum(src, acc, n); });
}
void CombineToAccum(DataType t, RedOp op, const void* a, const void* b, void* acc, size_t n) {
  Dispatch(t, [&](auto ops) { ops.Combine2(op, a, b, acc, n); });
}
void AccumulateInto(DataType t, RedOp op, void* acc, const void* src, size_t n) {
  Dispatch(t, [&](auto ops) { ops.Accumulate(op, acc, src, n); });
}
void CombineAccum(DataType t, RedOp op, void* acc, const void* other, size_t n) {
  Dispatch(t, [&](auto ops) { ops.CombineAccum(op, acc, other, n); });
}
void FromAccum(DataType t, RedOp op, int nranks, const void* acc, void* dst, size_t n) {
  Dispatch(t, [&](auto ops) { ops.FromAccum(op, nranks, acc, dst, n); });
}

}  // namespace weft
