#include "bench/check/verdict.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/check/beat_channel.h"

namespace weft_check {

namespace {

void Add(std::vector<int>* v, int x) {
  if (std::find(v->begin(), v->end(), x) == v->end()) v->push_back(x);
  std::sort(v->begin(), v->end());
}

}  // namespace

namespace {

// The ranks that got an output in a check's iterations: a rooted
// collective's roots (iteration mod n, pattern.h), else every rank.
std::vector<bool> Receivers(const CheckRow& row, int n) {
  const bool rooted = row.collective == "reduce" || row.collective == "gather";
  std::vector<bool> got(n, !rooted);
  for (int it = 0; rooted && it < std::min(row.iterations, n); ++it) got[it] = true;
  return got;
}

}  // namespace

bool JudgeCorrectness(Report* r) {
  const int n = r->nranks;
  std::vector<int> wrong_ranks, own;  // own: wrong where a peer that got the same check's output was right
  std::vector<bool> shared(n, true);  // suspects common to every wrong row of every rank
  std::string example;
  for (const CheckRow& row : r->correctness) {
    const std::vector<bool> got = Receivers(row, n);
    int receivers = 0, wrong = 0;
    for (int q = 0; q < n; ++q) {
      receivers += got[q];
      wrong += got[q] && row.wrong[q] > 0;
    }
    for (int q = 0; q < n; ++q) {
      if (row.wrong[q] == 0) continue;
      Add(&wrong_ranks, q);
      if (wrong < receivers) Add(&own, q);
      if (example.empty()) {
        example = absl::StrFormat("%s %s%s %d B on rank %d: %s", row.collective, row.dtype,
                                  row.op.empty() ? "" : " " + row.op, row.bytes, q, row.first[q]);
      }
      for (int s = 0; s < n; ++s) {
        if (std::find(row.suspects[q].begin(), row.suspects[q].end(), s) == row.suspects[q].end()) shared[s] = false;
      }
    }
  }
  if (wrong_ranks.empty()) return false;
  if (!own.empty()) {
    for (int q : own) {
      Add(&r->bad_ranks, q);
      r->why.push_back(absl::StrFormat("bad: %s computed wrong values (its own output; the other ranks' were right)",
                                       Who(*r, q)));
    }
    return true;
  }
  for (int s = 0; s < n; ++s) {
    if (!shared[s]) continue;
    Add(&r->bad_ranks, s);
    r->why.push_back(absl::StrFormat("bad: %s's contribution is damaged: every rank got wrong values, and every wrong "
                                     "element has a contribution from it (first: %s)", Who(*r, s), example));
  }
  if (r->bad_ranks.empty()) {
    r->why.push_back(absl::StrFormat("every rank got wrong values with no one contribution in common (first: %s); "
                                     "bisection localises it", example));
  }
  return true;
}

void JudgeSpeed(Report* r) {
  for (int q : r->slow_ranks) {
    r->why.push_back(absl::StrFormat("slow: %s: its fastest pair took %.1f us, the median rank's %.1f us", Who(*r, q),
                                     r->rank_pair_us[q], r->pair_median_us));
  }
  for (const auto& [a, b] : r->bad_links) {
    for (const PairRow& p : r->pairs) {
      if (p.a == a && p.b == b) {
        r->why.push_back(absl::StrFormat("slow link: %s <-> %s: %.1f us in pairing %s; both ranks are fast with "
                                         "other partners", Who(*r, a), Who(*r, b), p.time_us, p.pairing));
      }
    }
  }
}

void JudgeBisection(Report* r) {
  const Bisection& b = r->bisection;
  if (b.trigger == "wrong" && r->bad_ranks.empty()) {
    for (int q : b.isolated) {
      Add(&r->bad_ranks, q);
      r->why.push_back(absl::StrFormat("bad: %s: bisection isolated it (alone, its all-reduce is wrong)", Who(*r, q)));
    }
  }
  if (b.trigger == "slow" && r->pairs.empty()) {  // too few ranks for pairs: bisection decides
    for (int q : b.isolated) {
      Add(&r->slow_ranks, q);
      r->why.push_back(absl::StrFormat("slow: %s: bisection isolated it", Who(*r, q)));
    }
  }
  for (const auto& l : b.links) {
    if (std::find(r->bad_links.begin(), r->bad_links.end(), l) != r->bad_links.end()) continue;
    r->bad_links.push_back(l);
    r->why.push_back(absl::StrFormat("bad link: %s <-> %s: each is right alone, wrong or slow together",
                                     Who(*r, l.first), Who(*r, l.second)));
  }
  const std::vector<int>& named = b.trigger == "wrong" ? r->bad_ranks : r->slow_ranks;
  if (b.trigger != "none" && !b.isolated.empty() && b.isolated != named) {
    r->why.push_back(absl::StrFormat("note: bisection isolated [%s], the direct attribution named [%s]",
                                     absl::StrJoin(b.isolated, ", "), absl::StrJoin(named, ", ")));
  }
}

void JudgeHang(const std::vector<Beat>& beats, const std::string& channel, Report* r) {
  Hang& h = r->hang;
  h.found = true;
  h.beats = beats;
  h.channel = channel;
  h.sequence = -1;
  for (const Beat& b : h.beats) {
    if (!b.found) {
      h.no_heartbeat.push_back(b.rank);
      continue;
    }
    if (b.entered > h.sequence) {
      h.sequence = b.entered;
      h.call = b.current.empty() ? b.last : b.current;
    }
  }
  for (const Beat& b : h.beats) {
    if (!b.found || b.entered >= h.sequence) continue;
    h.never_joined.push_back(b.rank);
    Add(&r->bad_ranks, b.rank);
    r->why.push_back(absl::StrFormat("hung: %s never joined call %d (%s): it is still in call %d (%s), its last "
                                     "completed is %d (%s)", Who(*r, b.rank), h.sequence, h.call, b.entered,
                                     b.current.empty() ? "none" : b.current, b.completed,
                                     b.last.empty() ? "none" : b.last));
  }
  for (int q : h.no_heartbeat) {
    r->why.push_back(absl::StrFormat("hung: rank %d left no heartbeat in %s%s", q, channel,
                                     IsBeatAddress(channel) ? " (can every node reach rank 0 over TCP?)"
                                                            : " (is --heartbeat on a filesystem every node shares?)"));
  }
}

}  // namespace weft_check
