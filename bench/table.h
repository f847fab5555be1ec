// weft-bench's output: nccl-tests' table on stdout (rank 0), and the same
// rows as JSON for scripts.
//
// The columns and their formats are nccl-tests' (common.cu), so tools that
// read nccl-tests output read these; --baseline mpi appends the raw MPI
// collective's time, algbw and busbw and the ratio weft/mpi (of out-of-place
// busbw, > 1 when weft is faster) at the right of each row:
//
//   #       size         count      type   redop    root     time   algbw   busbw #wrong     time ...
//   #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us) ...
//       1048576        262144     float     sum      -1    412.3    2.54    3.81      0    409.8 ...
//   # Out of bounds values : 0 OK
//   # Avg bus bandwidth    : 3.8074
#ifndef WEFT_BENCH_TABLE_H_
#define WEFT_BENCH_TABLE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/args.h"
#include "bench/runner.h"

namespace weft_bench {

struct RunInfo {
  int nranks = 1;
  std::string backend;     // the backend weft chose
  std::string weft_version;
  std::string mpi_version;  // the MPI library's, "none" when no MPI launcher started the job
  std::vector<std::string> rank_lines;  // "# Rank ..." lines, every rank's, in rank order
};

// Totals for the footer: nccl-tests averages busbw over every measurement
// (out-of-place and in-place) of the run.
struct Totals {
  long long wrong = 0;
  double busbw_sum = 0;
  int busbw_count = 0;
  double baseline_busbw_sum = 0;
  int baseline_count = 0;
  double avg_busbw() const { return busbw_count > 0 ? busbw_sum / busbw_count : 0; }
  double avg_baseline_busbw() const { return baseline_count > 0 ? baseline_busbw_sum / baseline_count : 0; }
  void Add(const Row& row);
};

void PrintPreamble(const Options& o, const RunInfo& info);
void PrintHeader(const Options& o);
void PrintRow(const Options& o, const Row& row);
void PrintFooter(const Options& o, const Totals& totals);

// The whole run as one JSON document.
absl::Status WriteJson(const std::string& path, const Options& o, const RunInfo& info, const std::vector<Row>& rows,
                       const Totals& totals);

}  // namespace weft_bench

#endif  // WEFT_BENCH_TABLE_H_
