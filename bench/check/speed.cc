// Speed with attribution: the world's all-reduce by size, then pairs of
// ranks timed side by side (phases.h says how a slow rank differs from a
// slow link).
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/check/memory.h"
#include "bench/check/phases.h"
#include "core/status.h"

namespace weft_check {

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Every rank's `v`, through the robust gather.
absl::StatusOr<std::vector<double>> GatherDoubles(Rank& r, const std::vector<double>& v, const std::string& what) {
  ASSIGN_OR_RETURN(std::vector<std::string> all, r.Gather(absl::StrJoin(v, ",", [](std::string* o, double d) {
    absl::StrAppend(o, absl::StrFormat("%.17g", d));
  }), what));
  std::vector<double> out;
  for (const std::string& s : all) {
    for (absl::string_view x : absl::StrSplit(s, ',', absl::SkipEmpty())) {
      double d = 0;
      if (!absl::SimpleAtod(x, &d)) return weft::InternalError("%s: '%s' is not a number", what, std::string(x));
      out.push_back(d);
    }
  }
  return out;
}

constexpr int kPairRounds = 3;

bool Has(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Slower than the median rank by the ratio and by the floor.
bool Slow(const Report& r, double t) {
  return t > r.pair_median_us * r.slow_ratio && t - r.pair_median_us > r.slow_floor_us;
}

// Each rank's fastest pair, their median and the slow ranks, from
// all[rank * k + pairing]; whether any pair is slow.
bool Judge(const std::vector<double>& all, int n, size_t k, Report* out) {
  out->rank_pair_us.assign(n, 0);
  for (int q = 0; q < n; ++q) {
    double best = -1;
    for (size_t i = 0; i < k; ++i) {
      const double t = all[q * k + i];
      if (t >= 0 && (best < 0 || t < best)) best = t;
    }
    out->rank_pair_us[q] = best;
  }
  out->pair_median_us = Median(out->rank_pair_us);
  out->slow_ranks.clear();
  bool any = false;
  for (int q = 0; q < n; ++q) {
    if (Slow(*out, out->rank_pair_us[q])) out->slow_ranks.push_back(q);
    for (size_t i = 0; i < k; ++i) any = any || Slow(*out, all[q * k + i]);
  }
  return any;
}

struct Pairing {
  std::string name;
  std::vector<std::pair<int, int>> pairs;
};

std::vector<Pairing> Pairings(int n) {
  std::vector<Pairing> out(3);
  out[0].name = "ring-even";
  for (int a = 0; a + 1 < n; a += 2) out[0].pairs.push_back({a, a + 1});
  out[1].name = "ring-odd";
  for (int a = 1; a < n; a += 2) {
    const int b = (a + 1) % n;
    if (b != a && (n % 2 == 0 || b != 0)) out[1].pairs.push_back({a, b});
  }
  out[2].name = "halves";
  const int h = (n + 1) / 2;
  for (int a = 0; a + h < n; ++a) out[2].pairs.push_back({a, a + h});
  return out;
}

}  // namespace

absl::StatusOr<double> TakingTurns(Rank& r, int groups, int mine, const std::function<absl::StatusOr<double>()>& time,
                                   int calls, const std::string& what) {
  if (!r.oversubscribed()) {
    if (mine < 0) {
      r.Skip(calls);
      return -1.0;
    }
    return time();
  }
  double t = -1;
  for (int g = 0; g < groups; ++g) {
    if (g == mine) {
      ASSIGN_OR_RETURN(t, time());
    } else {
      r.Skip(calls);
    }
    RETURN_IF_ERROR(r.Call(absl::StrFormat("%s: turn %d done", what, g), [&] { return weftBarrier(r.world()); }));
  }
  return t;
}

absl::StatusOr<double> TimeOn(Rank& r, weftComm_t comm, size_t bytes, int iters, const std::string& what) {
  const size_t count = std::max<size_t>(1, bytes / 4);
  const weftMemoryKind_t memory = r.options().memory;
  const std::vector<float> ones(count, 1.0f);
  ASSIGN_OR_RETURN(const Buffer send, Buffer::Make(memory, count * 4));
  ASSIGN_OR_RETURN(const Buffer recv, Buffer::Make(memory, count * 4));
  RETURN_IF_ERROR(send.Upload(ones.data()));
  std::vector<double> us;
  for (int it = 0; it <= iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(r.Call(absl::StrFormat("%s #%d", what, it), [&] {
      return weftAllReduce(send.data(), recv.data(), count, weftFloat32, weftSum, comm, nullptr);
    }));
    const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (it > 0) us.push_back(t);  // the first call sets up; it is not timed
  }
  return Median(us);
}

absl::Status RunSpeed(Rank& r, Report* out) {
  const Plan& plan = r.options().plan;
  const int n = r.nranks();
  std::vector<double> mine;
  for (size_t bytes : plan.speed_bytes) {
    ASSIGN_OR_RETURN(const double t, TimeOn(r, r.world(), bytes, plan.speed_iters,
                                            absl::StrFormat("timed all_reduce %zu B", bytes)));
    mine.push_back(t);
  }
  ASSIGN_OR_RETURN(std::vector<double> all, GatherDoubles(r, mine, "gathering the timings"));
  const size_t k = plan.speed_bytes.size();
  for (size_t i = 0; i < k; ++i) {
    SpeedRow row;
    row.bytes = plan.speed_bytes[i];
    for (int q = 0; q < n; ++q) row.rank_time_us.push_back(all[q * k + i]);
    row.time_us = *std::max_element(row.rank_time_us.begin(), row.rank_time_us.end());
    const double bytes = static_cast<double>(std::max<size_t>(4, row.bytes / 4 * 4));
    row.algbw_gbs = row.time_us > 0 ? bytes / row.time_us / 1e3 : 0;
    row.busbw_gbs = row.algbw_gbs * 2.0 * (n - 1) / n;  // nccl-tests' all-reduce factor
    out->speed.push_back(row);
  }
  return absl::OkStatus();
}

// Every rank's time in each pairing (-1 where it sits out), n * 3 values.
static absl::StatusOr<std::vector<double>> MeasurePairs(Rank& r, int round) {
  const Plan& plan = r.options().plan;
  std::vector<double> mine;
  for (const Pairing& p : Pairings(r.nranks())) {
    int color = WEFT_SPLIT_NOCOLOR;
    for (size_t i = 0; i < p.pairs.size(); ++i) {
      if (p.pairs[i].first == r.rank() || p.pairs[i].second == r.rank()) color = static_cast<int>(i);
    }
    weftComm_t pair = nullptr;
    RETURN_IF_ERROR(r.Call("split into pairs " + p.name,
                           [&] { return weftCommSplit(r.world(), color, r.rank(), &pair); }));
    // Destroyed on every path: the timings below may fail.
    std::unique_ptr<weftComm, decltype(&weftCommDestroy)> owned(pair, &weftCommDestroy);
    ASSIGN_OR_RETURN(const double t, TakingTurns(r, static_cast<int>(p.pairs.size()), color, [&] {
      return TimeOn(r, pair, plan.pair_bytes, plan.pair_iters, "pair all_reduce " + p.name);
    }, plan.pair_iters + 1, "pairs " + p.name));
    mine.push_back(pair == nullptr ? -1 : t);
  }
  return GatherDoubles(r, mine, absl::StrFormat("gathering the pair timings, round %d", round));
}

absl::Status RunPairs(Rank& r, Report* out) {
  const Plan& plan = r.options().plan;
  const int n = r.nranks();
  out->slow_ratio = r.options().slow_ratio;
  out->slow_floor_us = r.options().slow_floor_us;
  out->pair_bytes = plan.pair_bytes;
  if (n < 3) return absl::OkStatus();  // two ranks make one pair: nothing to compare it with
  const std::vector<Pairing> pairings = Pairings(n);
  const size_t k = pairings.size();
  std::vector<double> all;
  // A pair found slow is timed again, up to twice, and keeps its best
  // round: a slow rank or link is slow every time, a busy moment of the
  // host once.
  for (int round = 0; round < kPairRounds; ++round) {
    ASSIGN_OR_RETURN(std::vector<double> t, MeasurePairs(r, round));
    if (all.empty()) {
      all = t;
    } else {
      for (size_t i = 0; i < all.size(); ++i) all[i] = std::min(all[i], t[i]);
    }
    if (!Judge(all, n, k, out)) break;
  }
  // A link is judged against the links of its kind: a pair across nodes
  // (the network) against the median pair across nodes, one within a node
  // (shared memory) against the median within a node. Otherwise every
  // link between nodes would be "slow" beside the ones inside a node.
  const std::vector<Identity>& who = r.everyone();
  const auto across = [&](int a, int b) { return who.size() == static_cast<size_t>(n) && who[a].node != who[b].node; };
  std::vector<double> kind[2];
  for (size_t i = 0; i < k; ++i) {
    for (const auto& [a, b] : pairings[i].pairs) {
      PairRow row;
      row.pairing = pairings[i].name;
      row.a = a;
      row.b = b;
      row.time_us = std::max(all[a * k + i], all[b * k + i]);
      kind[across(a, b)].push_back(row.time_us);
      out->pairs.push_back(row);
    }
  }
  const double median[2] = {kind[0].empty() ? 0 : Median(kind[0]), kind[1].empty() ? 0 : Median(kind[1])};
  for (PairRow& row : out->pairs) {
    const double m = median[across(row.a, row.b)];
    row.slow = row.time_us > m * out->slow_ratio && row.time_us - m > out->slow_floor_us;
    if (row.slow && !Has(out->slow_ranks, row.a) && !Has(out->slow_ranks, row.b)) {
      out->bad_links.push_back({row.a, row.b});
    }
  }
  return absl::OkStatus();
}

}  // namespace weft_check
