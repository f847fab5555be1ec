// Speed with attribution: the world's all-reduce by size, then pairs of
// ranks timed side by side (phases.h says how a slow rank differs from a
// slow link).
#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

absl::StatusOr<double> TimeOn(Rank& r, weftComm_t comm, size_t bytes, int iters, const std::string& what) {
  const size_t count = std::max<size_t>(1, bytes / 4);
  std::vector<float> send(count, 1.0f), recv(count);
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

absl::Status RunPairs(Rank& r, Report* out) {
  const Plan& plan = r.options().plan;
  const int n = r.nranks();
  out->slow_ratio = r.options().slow_ratio;
  out->slow_floor_us = r.options().slow_floor_us;
  if (n < 3) return absl::OkStatus();  // two ranks make one pair: nothing to compare it with
  std::vector<double> mine;  // this rank's time in each pairing, -1 where it sits out
  for (const Pairing& p : Pairings(n)) {
    int color = WEFT_SPLIT_NOCOLOR;
    for (size_t i = 0; i < p.pairs.size(); ++i) {
      if (p.pairs[i].first == r.rank() || p.pairs[i].second == r.rank()) color = static_cast<int>(i);
    }
    weftComm_t pair = nullptr;
    RETURN_IF_ERROR(r.Call("split into pairs " + p.name,
                           [&] { return weftCommSplit(r.world(), color, r.rank(), &pair); }));
    if (pair == nullptr) {
      r.Skip(plan.pair_iters + 1);
      mine.push_back(-1);
      continue;
    }
    absl::StatusOr<double> t = TimeOn(r, pair, plan.pair_bytes, plan.pair_iters, "pair all_reduce " + p.name);
    weftCommDestroy(pair);
    RETURN_IF_ERROR(t.status());
    mine.push_back(*t);
  }
  ASSIGN_OR_RETURN(std::vector<double> all, GatherDoubles(r, mine, "gathering the pair timings"));
  const std::vector<Pairing> pairings = Pairings(n);
  const size_t k = pairings.size();
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
  const double m = out->pair_median_us;
  const auto slow = [&](double t) { return t > m * out->slow_ratio && t - m > out->slow_floor_us; };
  for (int q = 0; q < n; ++q) {
    if (slow(out->rank_pair_us[q])) out->slow_ranks.push_back(q);
  }
  const auto is_slow_rank = [&](int q) {
    return std::find(out->slow_ranks.begin(), out->slow_ranks.end(), q) != out->slow_ranks.end();
  };
  for (size_t i = 0; i < k; ++i) {
    for (const auto& [a, b] : pairings[i].pairs) {
      PairRow row;
      row.pairing = pairings[i].name;
      row.a = a;
      row.b = b;
      row.time_us = std::max(all[a * k + i], all[b * k + i]);
      row.slow = slow(row.time_us);
      if (row.slow && !is_slow_rank(a) && !is_slow_rank(b)) out->bad_links.push_back({a, b});
      out->pairs.push_back(row);
    }
  }
  return absl::OkStatus();
}

}  // namespace weft_check
