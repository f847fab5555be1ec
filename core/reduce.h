// Host reduction primitives shared by the host backends.
//
// A reduction runs in an accumulation type: float32 for float16 and
// bfloat16 (so a half-precision result is rounded once, at the end, not at
// every step), int64 for the integer types (wrapping, so sums and products
// agree with the narrow type's own wrapping arithmetic, and avg divides the
// exact sum), and the type itself for float32 and float64. A backend reduces
// one chunk as
//
//   ToAccum(t, rank0_chunk, acc, n);
//   for (r = 1..N-1) AccumulateInto(t, op, acc, rank_r_chunk, n);
//   FromAccum(t, op, N, acc, out, n);
//
// always combining ranks in the same order, so every rank that computes a
// chunk gets the same bits.
#ifndef WEFT_CORE_REDUCE_H_
#define WEFT_CORE_REDUCE_H_

#include <cstddef>

#include "core/dtype.h"

namespace weft {

DataType AccumType(DataType t);
inline size_t AccumSize(DataType t) { return ElementSize(AccumType(t)); }
// True when the accumulation type is `t` itself, so a buffer of `t` can
// serve as the accumulator and ToAccum/FromAccum(sum) are plain copies.
inline bool AccumIsSelf(DataType t) { return AccumType(t) == t; }

// acc[i] = widen(src[i]).
void ToAccum(DataType t, const void* src, void* acc, size_t n);
// acc[i] = op(widen(a[i]), widen(b[i])): ToAccum(a) then AccumulateInto(b)
// in one pass, with the same bits. For a type that accumulates in itself
// `acc` may be the output, `a` or `b`.
void CombineToAccum(DataType t, RedOp op, const void* a, const void* b, void* acc, size_t n);
// acc[i] = op(acc[i], widen(src[i])); avg accumulates as a sum.
void AccumulateInto(DataType t, RedOp op, void* acc, const void* src, size_t n);
// acc[i] = op(acc[i], other[i]), both already in the accumulation type.
void CombineAccum(DataType t, RedOp op, void* acc, const void* other, size_t n);
// dst[i] = narrow(acc[i] / nranks for avg, else acc[i]).
void FromAccum(DataType t, RedOp op, int nranks, const void* acc, void* dst, size_t n);

// out[0..n) = op over q = 0..nranks-1 of src(q)[0..n), combined in rank
// order through `acc` (n elements of the accumulation type). `out` may be
// one of the sources: it is written only after every source was read.
template <typename SrcFn>
void ReduceInRankOrder(DataType t, RedOp op, int nranks, SrcFn src, size_t n, void* acc, void* out) {
  ToAccum(t, src(0), acc, n);
  for (int q = 1; q < nranks; ++q) AccumulateInto(t, op, acc, src(q), n);
  FromAccum(t, op, nranks, acc, out, n);
}

// The same result, bit for bit, in blocks of kReduceBlockBytes of
// accumulator on the stack: each block of `out` is written once, after
// every source's block was folded into an accumulator that stays in L1,
// where ReduceInRankOrder makes a pass per rank over an n-element one.
// `out` may be any of the sources (a block is read before it is written).
// A type that accumulates in itself folds straight into `out` when no
// source but the first is `out`.
constexpr size_t kReduceBlockBytes = 8192;
template <typename SrcFn>
void ReduceBlocked(DataType t, RedOp op, int nranks, SrcFn src, size_t n, void* out) {
  const size_t es = ElementSize(t);
  auto at = [es](const void* p, size_t i) { return static_cast<const unsigned char*>(p) + i * es; };
  bool into_out = AccumIsSelf(t) && nranks >= 2;
  for (int q = 1; q < nranks && into_out; ++q) into_out = src(q) != out;
  if (nranks == 1) {
    alignas(64) unsigned char acc[kReduceBlockBytes];
    const size_t block = kReduceBlockBytes / AccumSize(t);
    for (size_t i = 0; i < n; i += block) {
      const size_t m = n - i < block ? n - i : block;
      ToAccum(t, at(src(0), i), acc, m);
      FromAccum(t, op, 1, acc, static_cast<unsigned char*>(out) + i * es, m);
    }
    return;
  }
  if (into_out) {
    const size_t block = kReduceBlockBytes / es;
    auto* o = static_cast<unsigned char*>(out);
    for (size_t i = 0; i < n; i += block) {
      const size_t m = n - i < block ? n - i : block;
      CombineToAccum(t, op, at(src(0), i), at(src(1), i), o + i * es, m);
      for (int q = 2; q < nranks; ++q) AccumulateInto(t, op, o + i * es, at(src(q), i), m);
      if (op == RedOp::kAvg) FromAccum(t, op, nranks, o + i * es, o + i * es, m);
    }
    return;
  }
  alignas(64) unsigned char acc[kReduceBlockBytes];
  const size_t block = kReduceBlockBytes / AccumSize(t);
  for (size_t i = 0; i < n; i += block) {
    const size_t m = n - i < block ? n - i : block;
    CombineToAccum(t, op, at(src(0), i), at(src(1), i), acc, m);
    for (int q = 2; q < nranks; ++q) AccumulateInto(t, op, acc, at(src(q), i), m);
    FromAccum(t, op, nranks, acc, static_cast<unsigned char*>(out) + i * es, m);
  }
}

}  // namespace weft

#endif  // WEFT_CORE_REDUCE_H_
