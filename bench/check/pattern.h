// Inputs that say whose contribution a wrong element came from.
//
// All-reduce and reduce-scatter: element i has a mask m(i) of random bits,
// one per rank; rank r contributes 2^r to it when bit r is set and 0
// otherwise. Every sum is exact in any order (float32 up to 24 ranks,
// float64 up to 53; beyond that ranks share bits, r mod 53), and a rank whose
// contribution is damaged makes wrong exactly the elements whose masks have
// its bit: intersecting the masks of the wrong elements names it. All-gather:
// rank s's block holds s in its high bits, so a wrong element names the
// block's sender. Broadcast: a wrong element names the root.
//
//   Pattern p(Collective::kAllReduce, nranks, seed, count);
//   p.Fill(send, rank, iter);  ... weftAllReduce ...
//   Verdict v = p.Check(recv, rank, iter);  // v.wrong, v.suspects
#ifndef WEFT_BENCH_CHECK_PATTERN_H_
#define WEFT_BENCH_CHECK_PATTERN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace weft_check {

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast };
const char* Name(Coll c);
inline constexpr Coll kColls[] = {Coll::kAllReduce, Coll::kReduceScatter, Coll::kAllGather, Coll::kBroadcast};

struct Verdict {
  long long wrong = 0;
  std::string first;                // "element 17: got 12 want 14", empty when right
  std::vector<bool> suspects;       // ranks that every wrong element has a contribution from
};

class Pattern {
 public:
  // `count`: all-gather: the elements each rank sends; reduce-scatter: each
  // rank receives; all-reduce, broadcast: the whole buffer.
  Pattern(Coll c, int nranks, uint64_t seed, size_t count);
  weftDataType_t dtype() const { return dtype_; }
  size_t element_size() const { return dtype_ == weftFloat32 ? 4 : 8; }
  size_t send_count() const;
  size_t recv_count() const;
  int root(int iter) const { return iter % nranks_; }
  // Rank `rank`'s input of iteration `iter` into send (send_count elements).
  void Fill(void* send, int rank, int iter) const;
  // Compares recv (recv_count elements) with what `rank` must get.
  Verdict Check(const void* recv, int rank, int iter) const;

 private:
  double Contribution(int rank, size_t element, int iter) const;
  double Expected(int rank, size_t j, int iter) const;  // recv element j of `rank`
  bool Contributes(int r, int rank, size_t j, int iter) const;
  uint64_t Mask(size_t element, int iter) const;

  Coll coll_;
  int nranks_;
  uint64_t seed_;
  size_t count_;
  int bits_;  // ranks with a bit of their own
  weftDataType_t dtype_;
};

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_PATTERN_H_
