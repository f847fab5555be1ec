// Inputs whose collective results are exactly computable, so weft-bench -c
// checks every element of every rank bit for bit (nccl-tests' trick).
//
// Rank r's element i is a small integer drawn from a hash of (seed, r, i):
// within +-m for sum and avg, where m keeps any sum of nranks of them exact
// in the type (bfloat16 holds integers up to 256, float16 up to 2048); 1, -1
// or 2 for prod; within +-100 for max and min. So every float sum, product,
// max and min is exact whatever order a backend reduces in, and avg is the
// exact sum divided once, which rounds the same in float64 as in the
// documented float32 accumulation (double rounding is harmless when the
// wider type has at least 2p+2 bits). Integers use weft's documented
// arithmetic: 64-bit wrapping, avg truncated toward zero, then converted.
//
//   Spec s{weftFloat32, weftSum, nranks, seed};
//   FillInput(send, count, 0, rank, s);
//   FillReduced(expected, count, 0, s);
//   ... weftAllReduce(send, recv, count, ...) ...
//   Mismatch m = Compare(recv, expected, count, 4);   // m.wrong == 0
#ifndef WEFT_BENCH_CHECK_H_
#define WEFT_BENCH_CHECK_H_

#include <cstddef>
#include <cstdint>

#include "bench/collectives.h"
#include "weft/weft.h"

namespace weft_bench {

struct Spec {
  weftDataType_t type = weftFloat32;
  weftRedOp_t op = weftSum;  // decides the value range; any op for all_gather and broadcast
  int nranks = 1;
  uint64_t seed = 0;
};

// Rank `rank`'s input elements [offset, offset + count), written to buf[0..count).
void FillInput(void* buf, size_t count, size_t offset, int rank, const Spec& s);
// The op over every rank's input for elements [offset, offset + count).
void FillReduced(void* buf, size_t count, size_t offset, const Spec& s);
// Fills `buf` with the complement of `expected`, so an element nobody
// writes can never pass for a right one.
void Poison(void* buf, const void* expected, size_t bytes);

struct Mismatch {
  size_t wrong = 0;
  size_t first = 0;  // index of the first wrong element
  uint64_t got = 0;  // its bits, and the expected bits
  uint64_t want = 0;
};
// Compares `count` elements of `es` bytes bit for bit.
Mismatch Compare(const void* got, const void* want, size_t count, size_t es);

// One checked call of `c` on `rank`: fills its input (in `send`, or in
// place in `recv`), the expected result in `expected`, and poisons what the
// call must write. Returns the `count` elements at `*got` to compare with
// `expected` after the call (made with CallBuffers' pointers).
struct CheckBuffers {
  unsigned char* send;
  unsigned char* recv;
  unsigned char* expected;
};
void PrepareCheck(Collective c, bool in_place, const Layout& l, const Spec& s, int rank, int root,
                  const CheckBuffers& b, unsigned char** got, size_t* count);

}  // namespace weft_bench

#endif  // WEFT_BENCH_CHECK_H_
