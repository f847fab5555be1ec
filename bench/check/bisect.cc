// Bisection: the failing test again on the two halves of every failing
// group, one level at a time over the whole world, so every rank makes the
// same calls in the same order (a rank outside every group sits the level
// out). A failing half of one rank is isolated; a group that fails while
// both its halves pass needs both: when those halves are single ranks, the
// link between them is named.
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/check/phases.h"
#include "core/status.h"

namespace weft_check {

namespace {

struct Half {
  std::vector<int> ranks;
  long long wrong = 0;
  double time_us = 0;  // the slowest member's median
};

}  // namespace

absl::Status RunBisection(Rank& r, const std::string& trigger, Report* out) {
  const Plan& plan = r.options().plan;
  const bool by_time = trigger == "slow";
  Bisection& b = out->bisection;
  b.trigger = trigger;
  std::vector<int> all(r.nranks());
  for (int q = 0; q < r.nranks(); ++q) all[q] = q;
  b.steps.push_back({0, all, true, trigger == "slow" ? "the world is slow" : "the world has wrong values"});
  std::vector<std::vector<int>> groups = {all};
  for (int level = 1; !groups.empty(); ++level) {
    std::vector<Half> halves;
    for (const std::vector<int>& g : groups) {
      if (g.size() < 2) continue;
      const size_t h = (g.size() + 1) / 2;
      halves.push_back({std::vector<int>(g.begin(), g.begin() + h)});
      halves.push_back({std::vector<int>(g.begin() + h, g.end())});
    }
    if (halves.empty()) break;
    int color = WEFT_SPLIT_NOCOLOR;
    int me = 0;
    for (size_t i = 0; i < halves.size(); ++i) {
      const auto it = std::find(halves[i].ranks.begin(), halves[i].ranks.end(), r.rank());
      if (it != halves[i].ranks.end()) {
        color = static_cast<int>(i);
        me = static_cast<int>(it - halves[i].ranks.begin());
      }
    }
    weftComm_t sub = nullptr;
    RETURN_IF_ERROR(r.Call(absl::StrFormat("bisection level %d split", level),
                           [&] { return weftCommSplit(r.world(), color, r.rank(), &sub); }));
    long long wrong = 0;
    double us = 0;
    const int calls = by_time ? plan.bisect_iters + 1 : plan.bisect_iters;
    std::unique_ptr<weftComm, decltype(&weftCommDestroy)> owned(sub, &weftCommDestroy);
    const int n = sub == nullptr ? 0 : static_cast<int>(halves[color].ranks.size());
    if (by_time) {
      ASSIGN_OR_RETURN(us, TakingTurns(r, static_cast<int>(halves.size()), color, [&] {
        return TimeOn(r, sub, plan.bisect_bytes, plan.bisect_iters, absl::StrFormat("bisection level %d timed", level));
      }, calls, absl::StrFormat("bisection level %d", level)));
    } else if (sub == nullptr) {
      r.Skip(calls);
    } else {
      ASSIGN_OR_RETURN(const Verdict v, CheckOn(r, sub, n, me, Primary(Coll::kAllReduce, n), plan.bisect_bytes,
                                                        plan.bisect_iters));
      wrong = v.wrong;
    }
    ASSIGN_OR_RETURN(std::vector<std::string> got,
                     r.Gather(absl::StrFormat("%d %d %.17g", color, wrong, us),
                              absl::StrFormat("bisection level %d results", level)));
    for (const std::string& s : got) {
      const std::vector<std::string> f = absl::StrSplit(s, ' ');
      int c = -1;
      long long w = 0;
      double t = 0;
      if (f.size() != 3 || !absl::SimpleAtoi(f[0], &c) || !absl::SimpleAtoi(f[1], &w) || !absl::SimpleAtod(f[2], &t)) {
        return weft::InternalError("bisection level %d: a rank's result '%s' does not parse", level, s);
      }
      if (c < 0 || c >= static_cast<int>(halves.size())) continue;
      halves[c].wrong += w;
      halves[c].time_us = std::max(halves[c].time_us, t);
    }
    std::vector<std::vector<int>> next;
    for (size_t i = 0; i < halves.size(); i += 2) {
      bool bad[2];
      for (int k = 0; k < 2; ++k) {
        const Half& x = halves[i + k];
        const Half& other = halves[i + 1 - k];
        if (by_time) {
          bad[k] = x.time_us > other.time_us * out->slow_ratio && x.time_us - other.time_us > out->slow_floor_us;
          b.steps.push_back({level, x.ranks, bad[k], absl::StrFormat("%.1f us against %.1f us", x.time_us,
                                                                     other.time_us)});
        } else {
          bad[k] = x.wrong > 0;
          b.steps.push_back({level, x.ranks, bad[k], absl::StrFormat("%d wrong elements", x.wrong)});
        }
      }
      for (int k = 0; k < 2; ++k) {
        if (!bad[k]) continue;
        if (halves[i + k].ranks.size() == 1) {
          b.isolated.push_back(halves[i + k].ranks[0]);
        } else {
          next.push_back(halves[i + k].ranks);
        }
      }
      if (!bad[0] && !bad[1] && halves[i].ranks.size() == 1 && halves[i + 1].ranks.size() == 1) {
        b.links.push_back({halves[i].ranks[0], halves[i + 1].ranks[0]});
      }
    }
    groups = std::move(next);
  }
  std::sort(b.isolated.begin(), b.isolated.end());
  return absl::OkStatus();
}

}  // namespace weft_check
