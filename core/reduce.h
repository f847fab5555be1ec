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

}  // namespace weft

#endif  // WEFT_CORE_REDUCE_H_
