// The measurements of a weft-check run, each collective over the world
// (every rank calls it; every rank gets the combined result).
//
//   correctness: every collective at the plan's sizes in its everyday form
//     (float32 sum) and, at the plan's matrix sizes, in every dtype and
//     reduce op, with attributable inputs (pattern.h), repeated; per rank,
//     the wrong elements and whose contributions they share.
//   speed: the world's all-reduce by size, each rank's median time.
//   pairs: the world split into pairs three ways (neighbours 2k and 2k+1,
//     neighbours 2k+1 and 2k+2, rank r and r + n/2), each pair timing an
//     all-reduce at once. A slow rank is slow in every pair it is in; a
//     slow link only in one. Each rank's figure is its fastest pair, so one
//     slow rank cannot drag the median its peers are judged by.
//   bisection: the failing test again on halves of the failing group
//     (weftCommSplit), recursing into the halves that fail.
#ifndef WEFT_BENCH_CHECK_PHASES_H_
#define WEFT_BENCH_CHECK_PHASES_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "bench/check/pattern.h"
#include "bench/check/rank.h"
#include "bench/check/report.h"

namespace weft_check {

absl::Status RunCorrectness(Rank& r, Report* out);
absl::Status RunSpeed(Rank& r, Report* out);
absl::Status RunPairs(Rank& r, Report* out);
// `trigger`: "wrong" (the correctness test) or "slow" (the timed one).
absl::Status RunBisection(Rank& r, const std::string& trigger, Report* out);

// One rank's part in `iters` checked calls of `c` on `comm` (`n` ranks,
// this one `me`) of case `k`: the wrong elements it got and the suspects
// they share.
absl::StatusOr<Verdict> CheckOn(Rank& r, weftComm_t comm, int n, int me, const Case& k, size_t bytes, int iters);
// This rank's median time of an all-reduce of `bytes` on `comm` (one
// untimed call first, then `iters` timed): iters + 1 calls.
absl::StatusOr<double> TimeOn(Rank& r, weftComm_t comm, size_t bytes, int iters, const std::string& what);
// `time()` for this rank's group `mine` of `groups` (-1: in none, which
// returns -1), each making `calls` calls: all groups at once, or one after
// another with a world barrier between turns where the ranks outnumber a
// node's cores (Rank::oversubscribed).
absl::StatusOr<double> TakingTurns(Rank& r, int groups, int mine, const std::function<absl::StatusOr<double>()>& time,
                                   int calls, const std::string& what);

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_PHASES_H_
