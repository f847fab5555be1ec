// weft-check's command line and the plans it names.
//
//   weft-check [--plan quick|matrix|full] [--memory host|cuda] [--json FILE] [--plot DIR]
//              [--ranks N] [--backend mpi|ucx] [--timeout-ms MS] [--slow-ratio X]
//              [--slow-floor-us US] [--heartbeat DIR] [--seed S]
//              [--collectives all_reduce,gather,...]
//
// The parser only reads argv; it prints nothing and never exits.
#ifndef WEFT_BENCH_CHECK_OPTIONS_H_
#define WEFT_BENCH_CHECK_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/check/pattern.h"
#include "weft/weft.h"

namespace weft_check {

// What one run measures. quick (every collective in float32) finishes in
// about a second on one node; matrix adds every dtype and reduce op at one
// small size, a few seconds; full has the matrix at two sizes and the large
// sizes, minutes on a loaded host.
struct Plan {
  std::string name;
  std::vector<size_t> check_bytes;  // correctness: every collective, float32 sum, at each size
  int check_iters = 0;              // repeated, for intermittent faults
  std::vector<size_t> matrix_bytes;  // ... and in every dtype and reduce op at each of these
  int matrix_iters = 0;
  std::vector<size_t> speed_bytes;  // the world's all-reduce bandwidth by size
  int speed_iters = 0;
  size_t pair_bytes = 0;            // pairwise exchanges
  int pair_iters = 0;
  size_t bisect_bytes = 0;          // the test bisection repeats on halves
  int bisect_iters = 0;
};

struct Options {
  Plan plan;
  weftMemoryKind_t memory = weftMemoryHost;
  std::string json_path;
  std::string plot_dir;
  int ranks = 1;                  // in-process ranks when no launcher started the job
  weftBackend_t backend = weftBackendAuto;
  int timeout_ms = 10000;         // a collective that takes longer is a hang
  double slow_ratio = 2.0;        // slower than the median by this factor ...
  double slow_floor_us = 1000.0;  // ... and by at least this much is slow
  std::string heartbeat_dir;      // empty: a fresh directory under /tmp
  uint64_t seed = 1;
  std::vector<int> collectives;   // the Coll values to check (pattern.h); empty: every one
  bool help = false;
  // Whether the correctness checks include collective `c`.
  bool Selected(Coll c) const;
};

absl::StatusOr<Plan> PlanNamed(const std::string& name);
absl::StatusOr<Options> ParseArgs(int argc, char** argv);
std::string Usage(const char* argv0);

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_OPTIONS_H_
