// Inputs that say whose contribution a wrong element came from.
//
// A case is one collective in one dtype (and one reduce op where it
// reduces). Every element of every input is a small integer chosen so that
// each expected output is exact in the dtype, in any order of reduction:
//   sum, avg: element e has a mask m(e) of random bits; rank r contributes
//     2^b (b = r mod B, B the ranks with a bit of their own, as many as the
//     dtype holds exactly) when bit b is set and 0 otherwise; avg's inputs
//     are n times that, so that the average is the sum of the bits. A rank
//     whose contribution is damaged makes wrong exactly the elements whose
//     masks have its bit: intersecting the masks of the wrong elements
//     names it.
//   prod: 2 or 1 by the same bits (a product of powers of two), max and min:
//     a random value per rank; every rank takes part in every element, so a
//     wrong element names no one in particular.
//   the collectives that move data (all_gather, gather, all_to_all,
//     send/recv, broadcast, scatter): a random value per rank and element;
//     a wrong element names the rank whose block it is (its sender).
// Rooted collectives take root = iteration mod n; send/recv shifts by
// k = 1 + iteration mod (n - 1): rank r sends to r + k, receives from r - k.
//
//   Pattern p(Case{Coll::kAllReduce, weftInt8, weftMax}, nranks, seed, count);
//   p.Fill(send, rank, iter);  ... the collective ...
//   Verdict v = p.Check(recv, rank, iter);  // v.wrong, v.suspects
#ifndef WEFT_BENCH_CHECK_PATTERN_H_
#define WEFT_BENCH_CHECK_PATTERN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace weft_check {

enum class Coll {
  kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kGather, kScatter, kAllToAll, kSendRecv
};
const char* Name(Coll c);
bool Reduces(Coll c);
inline constexpr Coll kColls[] = {Coll::kAllReduce, Coll::kReduceScatter, Coll::kAllGather, Coll::kBroadcast,
                                  Coll::kReduce,    Coll::kGather,        Coll::kScatter,   Coll::kAllToAll,
                                  Coll::kSendRecv};
// "all_reduce" -> Coll::kAllReduce; false for a name that is none.
bool CollNamed(const std::string& name, Coll* c);

const char* TypeName(weftDataType_t t);
const char* OpName(weftRedOp_t op);
size_t TypeSize(weftDataType_t t);

struct Case {
  Coll coll = Coll::kAllReduce;
  weftDataType_t dtype = weftFloat32;
  weftRedOp_t op = weftSum;  // weftSum where the collective does not reduce
};
// The collective's everyday form: float32 sum (float64 where float32 cannot
// give every rank a bit, beyond 24 ranks).
Case Primary(Coll c, int nranks);
// Every dtype, and every reduce op where the collective reduces, whose
// inputs can be exact for `nranks` ranks (an int8 sum of 200 ranks cannot).
std::vector<Case> Matrix(Coll c, int nranks);

struct Verdict {
  long long wrong = 0;
  std::string first;                // "element 17: got 12 want 14", empty when right
  std::vector<bool> suspects;       // ranks that every wrong element has a contribution from
};

class Pattern {
 public:
  // `count`: all_gather, gather: the elements each rank sends;
  // reduce_scatter, scatter, all_to_all: each block; the others: the whole
  // buffer.
  Pattern(Case k, int nranks, uint64_t seed, size_t count);
  const Case& kind() const { return k_; }
  size_t element_size() const { return TypeSize(k_.dtype); }
  size_t count() const { return count_; }
  size_t send_count() const;
  size_t recv_count() const;
  int root(int iter) const { return iter % nranks_; }
  int shift(int iter) const { return nranks_ < 2 ? 0 : 1 + iter % (nranks_ - 1); }
  // Whether `rank` gets an output in iteration `iter` (a reduce's or a
  // gather's root only).
  bool Receives(int rank, int iter) const;
  // Rank `rank`'s input of iteration `iter` into send (send_count elements).
  void Fill(void* send, int rank, int iter) const;
  // Compares recv (recv_count elements) with what `rank` must get.
  Verdict Check(const void* recv, int rank, int iter) const;

 private:
  double Value(int rank, size_t element, int iter) const;  // rank's input at logical element
  double ValueOf(int rank, uint64_t mask) const;           // ... given that element's mask
  double Expected(int rank, size_t j, int iter) const;     // recv element j of `rank`
  bool Contributes(int r, int rank, size_t j, int iter) const;
  uint64_t Mask(size_t element, int iter) const;
  int Sender(int rank, size_t j, int iter) const;  // the data movers: whose value recv element j is
  size_t Source(int rank, size_t j) const;         // ... and at which of its logical elements

  Case k_;
  int nranks_;
  uint64_t seed_;
  size_t count_;
  int bits_;         // sum, avg: ranks with a bit of their own; prod: ranks that may contribute 2
  double scale_;     // avg: n, else 1
  double range_;     // max, min and the data movers: values lie in [0, range)
};

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_PATTERN_H_
