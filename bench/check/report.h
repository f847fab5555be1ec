// What weft-check found: every measurement, the verdicts drawn from them,
// the human summary rank 0 prints and the JSON report (its schema is
// bench/check/report.schema.json; docs/harness.md explains each field).
#ifndef WEFT_BENCH_CHECK_REPORT_H_
#define WEFT_BENCH_CHECK_REPORT_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bench/check/heartbeat.h"
#include "bench/check/rank.h"

namespace weft_check {

// One collective in one dtype (and op) at one size, every rank's view of it.
struct CheckRow {
  std::string collective;
  std::string dtype;
  std::string op;  // the reduce op; empty where the collective does not reduce
  size_t bytes = 0;
  int iterations = 0;
  std::vector<long long> wrong;           // per rank
  std::vector<std::string> first;         // per rank: its first wrong element
  std::vector<std::vector<int>> suspects;  // per rank: whose contribution every wrong element shares
};

struct SpeedRow {
  size_t bytes = 0;
  double time_us = 0;  // the slowest rank's median
  double algbw_gbs = 0, busbw_gbs = 0;
  std::vector<double> rank_time_us;  // each rank's median
};

struct PairRow {
  std::string pairing;  // ring-even, ring-odd, halves
  int a = 0, b = 0;
  double time_us = 0;
  bool slow = false;
};

struct Step {
  int level = 0;
  std::vector<int> ranks;
  bool bad = false;
  std::string detail;  // "12 wrong", "20.4 ms vs 0.1 ms"
};

struct Bisection {
  std::string trigger = "none";  // "wrong", "slow" or "none"
  std::vector<Step> steps;
  std::vector<int> isolated;
  std::vector<std::pair<int, int>> links;
};

struct Hang {
  bool found = false;
  long long sequence = 0;  // the call that never finished
  std::string call;
  std::vector<int> never_joined;
  std::vector<int> no_heartbeat;
  std::vector<Beat> beats;
  std::string channel;  // where the beats came from: a directory, or "tcp:..." (rank 0's listener)
};

struct Report {
  std::string plan, backend, memory;
  int nranks = 0;
  std::vector<Identity> ranks;
  std::vector<CheckRow> correctness;
  std::vector<SpeedRow> speed;
  std::vector<PairRow> pairs;
  size_t pair_bytes = 0;
  std::vector<double> rank_pair_us;  // each rank's fastest pair
  double pair_median_us = 0;
  double slow_ratio = 0, slow_floor_us = 0;
  Bisection bisection;
  Hang hang;
  std::vector<std::string> errors;
  // Verdicts.
  std::vector<int> bad_ranks, slow_ranks;
  std::vector<std::pair<int, int>> bad_links;
  std::vector<std::string> why;  // one line per verdict
  bool pass() const { return bad_ranks.empty() && slow_ranks.empty() && bad_links.empty() && !hang.found &&
                             errors.empty(); }
};

// "rank 2 (node gpu07, device cuda:1)".
std::string Who(const Report& r, int rank);
// The summary rank 0 prints, one line each.
std::vector<std::string> Summary(const Report& r);
absl::Status WriteJson(const std::string& path, const Report& r);

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_REPORT_H_
