// weft-bench's command line: nccl-tests' flags, plus --json, --backend and
// --baseline.
//
//   weft-bench all_reduce -b 8 -e 64M -f 4 -c 1 --baseline mpi --json out.json
//
// Sizes take nccl-tests' suffixes (K, M, G: powers of 1024). The parser
// only reads argv; it prints nothing and never exits, so main decides what
// a rank says.
#ifndef WEFT_BENCH_ARGS_H_
#define WEFT_BENCH_ARGS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/collectives.h"
#include "weft/weft.h"

namespace weft_bench {

// How the per-rank times of one measurement become the reported one (-a).
enum class Average : int { kRank0 = 0, kMean = 1, kMin = 2, kMax = 3 };

struct Options {
  Collective collective = Collective::kAllReduce;
  size_t min_bytes = 32u << 20;  // nccl-tests' defaults
  size_t max_bytes = 32u << 20;
  size_t step_bytes = 1u << 20;
  size_t step_factor = 1;        // > 1: multiply; else add step_bytes
  int iters = 20;
  int warmup_iters = 5;
  int check = 1;                 // check iterations per size (0: no check)
  std::vector<weftDataType_t> types = {weftFloat32};
  std::vector<weftRedOp_t> ops = {weftSum};
  int root = 0;
  bool blocking = false;         // -z 1: a barrier after every collective
  // -y 1 (default): stream NULL, every host call blocks. -y 0: enqueue the
  // timed loop on a weft host stream, synchronise once at its end.
  bool stream_null = true;
  Average average = Average::kMean;
  weftBackend_t backend = weftBackendAuto;
  bool baseline_mpi = false;
  std::string json_path;         // empty: no JSON
  bool help = false;
};

absl::StatusOr<Options> ParseArgs(int argc, char** argv);
std::string Usage(const char* argv0);

// nccl-tests' size syntax: a number with an optional K, M or G suffix.
absl::StatusOr<size_t> ParseSize(const char* flag, const std::string& text);

}  // namespace weft_bench

#endif  // WEFT_BENCH_ARGS_H_
