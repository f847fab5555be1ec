// The collective conformance check, shared by every backend's tests.
//
// One Case is one collective call (which collective, dtype, op, count,
// in-place or not, root). CheckCase runs it on the calling rank and compares
// the result with a float64 (or exact int64) reference. Every rank's input
// is a pure function of (seed, rank, element), so each rank computes the
// reference for its own output locally, without trusting any communication.
//
// Inputs are never zero. "Exact" inputs (small integers for sum/avg, powers
// of two for prod) make float sums exact in any order, so results compare
// bit for bit; "real" inputs (uniform reals) compare with a stated error
// bound. float16/bfloat16 may be one rounding off the reference (they are
// reduced in float32, then rounded). Outputs are poisoned (NaN bytes) with
// guard elements past the end; out-of-place inputs must come back unchanged;
// results that should be equal on every rank are hashed and the hashes
// all-gathered through the communicator under test.
//
//   for (const Case& c : MatrixCases(comm.size()))
//     if (std::string err = CheckCase(comm, c, seed); !err.empty()) ADD_FAILURE() << err;
//
// Every rank must run the same cases in the same order.
#ifndef WEFT_TESTS_COMMON_COLLECTIVE_CHECK_H_
#define WEFT_TESTS_COMMON_COLLECTIVE_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"

namespace weft {
namespace testing {

enum class Coll : int { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kGather, kScatter, kAllToAll };
const char* Name(Coll c);
inline bool Reduces(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduceScatter || c == Coll::kReduce; }
inline bool HasRoot(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kReduce || c == Coll::kGather || c == Coll::kScatter;
}

enum class Inputs : int { kExact, kReal };

struct Case {
  Coll coll = Coll::kAllReduce;
  DataType t = DataType::kFloat32;
  RedOp op = RedOp::kSum;  // reductions only
  size_t count = 0;        // per-rank count (recvcount / sendcount for RS / AG)
  bool in_place = false;
  int root = 0;            // broadcast, reduce, gather, scatter
  Inputs inputs = Inputs::kExact;
  std::string Describe() const;
};

// The counts the issue asks for.
inline constexpr size_t kCounts[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};
inline constexpr size_t kBigCount = (size_t{1} << 20) + 3;

// Every collective x dtype x op x count x in-place/out-of-place (all-to-all:
// out of place only), with exact
// inputs, plus real inputs for floating sum/avg/prod. The big count (2^20+3)
// runs on a subset, both in place and out of place: reductions with float32
// sum (exact and real inputs), bfloat16 avg and int8 avg (partials travel in
// the accumulation type), float64 prod and int32 max (8- and 4-byte element
// types reduced in their own type); all-gather and broadcast of float16 and
// float64. What a large count adds is segmentation and pipelining, which
// depend on the element and wire sizes that subset covers; every dtype x op
// pair runs at the smaller counts (and through the pipelined paths with a
// small segment size: CasesAtCounts). Checking every pair at 2^20+3 would
// cost minutes of reference arithmetic for 4 ranks on 2 cores.
std::vector<Case> MatrixCases(int world_size);
// All dtype x op x {in-place, out-of-place} at `counts` (exact and real inputs).
std::vector<Case> CasesAtCounts(int world_size, const std::vector<size_t>& counts);

// Runs `c` on this rank; "" when it conforms, else what went wrong.
std::string CheckCase(Communicator& comm, const Case& c, uint64_t seed);

// The same all-gathered 64-bit hash check CheckCase uses: "" when every rank
// passed the same `h`.
std::string CheckSameOnAllRanks(Communicator& comm, uint64_t h, const std::string& what);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_COLLECTIVE_CHECK_H_
