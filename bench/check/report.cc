#include "bench/check/report.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace weft_check {

namespace {

std::string Quote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      o += absl::StrFormat("\\u%04x", c);
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

std::string Ints(const std::vector<int>& v) { return absl::StrCat("[", absl::StrJoin(v, ", "), "]"); }

std::string Links(const std::vector<std::pair<int, int>>& v) {
  std::vector<std::string> p;
  for (const auto& [a, b] : v) p.push_back(absl::StrFormat("[%d, %d]", a, b));
  return absl::StrCat("[", absl::StrJoin(p, ", "), "]");
}

std::string Num(double d) { return absl::StrFormat("%.6g", d); }

std::string Doubles(const std::vector<double>& v) {
  std::vector<std::string> s;
  for (double d : v) s.push_back(Num(d));
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

std::string Size(size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return absl::StrFormat("%zu MiB", b >> 20);
  if (b >= 1024 && b % 1024 == 0) return absl::StrFormat("%zu KiB", b >> 10);
  return absl::StrFormat("%zu B", b);
}

std::string Group(const std::vector<int>& ranks) {
  if (ranks.size() > 2 && ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size())) {
    return absl::StrFormat("[%d-%d]", ranks.front(), ranks.back());
  }
  return absl::StrCat("[", absl::StrJoin(ranks, ","), "]");
}

}  // namespace

std::string Who(const Report& r, int rank) {
  if (rank < 0 || rank >= static_cast<int>(r.ranks.size())) return absl::StrFormat("rank %d", rank);
  return absl::StrFormat("rank %d (node %s, device %s)", rank, r.ranks[rank].node, r.ranks[rank].device);
}

std::vector<std::string> Summary(const Report& r) {
  std::vector<std::string> s;
  std::vector<std::string> nodes;
  for (const Identity& i : r.ranks) {
    if (std::find(nodes.begin(), nodes.end(), i.node) == nodes.end()) nodes.push_back(i.node);
  }
  s.push_back(absl::StrFormat("weft-check: %d ranks on %zu node%s, backend %s, %s memory, plan %s", r.nranks,
                              nodes.size(), nodes.size() == 1 ? "" : "s", r.backend, r.memory, r.plan));
  long long wrong = 0;
  for (const CheckRow& row : r.correctness) {
    for (long long w : row.wrong) wrong += w;
  }
  if (!r.correctness.empty()) {
    s.push_back(absl::StrFormat("# correctness: %zu checks (collective x dtype x op x size, repeated): %s",
                                r.correctness.size(),
                                wrong == 0 ? "every element right on every rank"
                                           : absl::StrFormat("%d wrong elements", wrong)));
  }
  constexpr int kWrongLines = 8;  // the JSON has every one
  int lines = 0;
  for (const CheckRow& row : r.correctness) {
    for (size_t q = 0; q < row.wrong.size(); ++q) {
      if (row.wrong[q] == 0 || lines++ >= kWrongLines) continue;
      s.push_back(absl::StrFormat("#   %s %s%s %s: rank %zu got %d wrong (%s)%s", row.collective, row.dtype,
                                  row.op.empty() ? "" : " " + row.op, Size(row.bytes), q, row.wrong[q], row.first[q],
                                  row.suspects[q].empty() ? ""
                                                          : "; every one has a contribution from rank " +
                                                                absl::StrJoin(row.suspects[q], ", rank ")));
    }
  }
  if (lines > kWrongLines) {
    s.push_back(absl::StrFormat("#   ... and %d more (collective, size, rank) with wrong elements",
                                lines - kWrongLines));
  }
  if (!r.speed.empty()) {
    const SpeedRow& last = r.speed.back();
    s.push_back(absl::StrFormat("# speed: all_reduce %s to %s; at %s %.1f us, busbw %.2f GB/s", Size(r.speed[0].bytes),
                                Size(last.bytes), Size(last.bytes), last.time_us, last.busbw_gbs));
  }
  if (!r.pairs.empty()) {
    s.push_back(absl::StrFormat("# pairs: %zu pairs in 3 pairings; a rank's fastest pair: median %.1f us (slow: "
                                "over %.2gx and %.0f us more)", r.pairs.size(), r.pair_median_us, r.slow_ratio,
                                r.slow_floor_us));
  }
  const Bisection& b = r.bisection;
  if (b.trigger != "none") {
    std::vector<std::string> steps;
    for (const Step& st : b.steps) {
      if (st.level == 0) continue;
      steps.push_back(absl::StrFormat("L%d %s %s (%s)", st.level, Group(st.ranks), st.bad ? "bad" : "good",
                                      st.detail));
    }
    s.push_back(absl::StrFormat("# bisection (%s): %s -> isolated %s%s", b.trigger, absl::StrJoin(steps, "; "),
                                Ints(b.isolated), b.links.empty() ? "" : ", links " + Links(b.links)));
  }
  if (r.hang.found) {
    s.push_back(absl::StrFormat("# hang: call %d (%s) did not finish; never joined: %s", r.hang.sequence, r.hang.call,
                                r.hang.never_joined.empty() ? "none (every rank entered it)"
                                                            : Ints(r.hang.never_joined)));
    for (const Beat& bt : r.hang.beats) {
      if (!bt.found) {
        s.push_back(absl::StrFormat("#   rank %d: no heartbeat", bt.rank));
        continue;
      }
      s.push_back(absl::StrFormat("#   rank %d: last completed %d (%s), in %s", bt.rank, bt.completed,
                                  bt.last.empty() ? "none" : bt.last, bt.current.empty() ? "no call" : bt.current));
    }
  }
  for (const std::string& e : r.errors) s.push_back("# error: " + e);
  for (const std::string& w : r.why) s.push_back("# " + w);
  if (r.pass()) {
    s.push_back(absl::StrFormat("PASS: %d ranks, no wrong values, no slow rank or link, no hang", r.nranks));
  } else {
    s.push_back(absl::StrFormat("FAIL: bad_ranks %s, slow_ranks %s, bad_links %s%s", Ints(r.bad_ranks),
                                Ints(r.slow_ranks), Links(r.bad_links), r.hang.found ? ", hung" : ""));
  }
  return s;
}

absl::Status WriteJson(const std::string& path, const Report& r) {
  std::string j = "{\n";
  j += absl::StrFormat("  \"result\": \"%s\",\n", r.pass() ? "pass" : "fail");
  j += absl::StrFormat("  \"bad_ranks\": %s,\n  \"slow_ranks\": %s,\n  \"bad_links\": %s,\n", Ints(r.bad_ranks),
                       Ints(r.slow_ranks), Links(r.bad_links));
  j += absl::StrFormat("  \"plan\": %s,\n  \"backend\": %s,\n  \"memory\": %s,\n  \"nranks\": %d,\n", Quote(r.plan),
                       Quote(r.backend), Quote(r.memory), r.nranks);
  std::vector<std::string> v;
  for (const Identity& i : r.ranks) {
    v.push_back(absl::StrFormat("    {\"rank\": %d, \"node\": %s, \"device\": %s}", i.rank, Quote(i.node),
                                Quote(i.device)));
  }
  j += "  \"ranks\": [\n" + absl::StrJoin(v, ",\n") + "\n  ],\n";
  v.clear();
  for (const CheckRow& c : r.correctness) {
    std::vector<std::string> first, sus;
    for (const std::string& f : c.first) first.push_back(Quote(f));
    for (const auto& s : c.suspects) sus.push_back(Ints(s));
    v.push_back(absl::StrFormat("    {\"collective\": %s, \"dtype\": %s, \"op\": %s, \"bytes\": %d, "
                                "\"iterations\": %d, \"wrong\": [%s], \"first_wrong\": [%s], \"suspects\": [%s]}",
                                Quote(c.collective), Quote(c.dtype), c.op.empty() ? "null" : Quote(c.op), c.bytes,
                                c.iterations,
                                absl::StrJoin(c.wrong, ", "), absl::StrJoin(first, ", "), absl::StrJoin(sus, ", ")));
  }
  j += "  \"correctness\": [\n" + absl::StrJoin(v, ",\n") + (v.empty() ? "" : "\n") + "  ],\n";
  v.clear();
  for (const SpeedRow& s : r.speed) {
    v.push_back(absl::StrFormat("    {\"collective\": \"all_reduce\", \"bytes\": %d, \"time_us\": %s, "
                                "\"algbw_gbs\": %s, \"busbw_gbs\": %s, \"rank_time_us\": %s}",
                                s.bytes, Num(s.time_us), Num(s.algbw_gbs), Num(s.busbw_gbs), Doubles(s.rank_time_us)));
  }
  j += "  \"speed\": [\n" + absl::StrJoin(v, ",\n") + (v.empty() ? "" : "\n") + "  ],\n";
  v.clear();
  for (const PairRow& p : r.pairs) {
    v.push_back(absl::StrFormat("    {\"pairing\": %s, \"ranks\": [%d, %d], \"time_us\": %s, \"slow\": %s}",
                                Quote(p.pairing), p.a, p.b, Num(p.time_us), p.slow ? "true" : "false"));
  }
  j += "  \"pairs\": [\n" + absl::StrJoin(v, ",\n") + (v.empty() ? "" : "\n") + "  ],\n";
  j += absl::StrFormat("  \"pair_bytes\": %d,\n  \"rank_pair_time_us\": %s,\n  \"pair_median_us\": %s,\n",
                       r.pair_bytes, Doubles(r.rank_pair_us), Num(r.pair_median_us));
  j += absl::StrFormat("  \"thresholds\": {\"slow_ratio\": %s, \"slow_floor_us\": %s},\n", Num(r.slow_ratio),
                       Num(r.slow_floor_us));
  v.clear();
  for (const Step& s : r.bisection.steps) {
    v.push_back(absl::StrFormat("      {\"level\": %d, \"ranks\": %s, \"result\": \"%s\", \"detail\": %s}", s.level,
                                Ints(s.ranks), s.bad ? "bad" : "good", Quote(s.detail)));
  }
  j += absl::StrFormat("  \"bisection\": {\n    \"trigger\": %s,\n    \"isolated\": %s,\n    \"links\": %s,\n"
                       "    \"steps\": [\n%s%s    ]\n  },\n",
                       Quote(r.bisection.trigger), Ints(r.bisection.isolated), Links(r.bisection.links),
                       absl::StrJoin(v, ",\n"), v.empty() ? "" : "\n");
  if (r.hang.found) {
    v.clear();
    for (const Beat& b : r.hang.beats) {
      v.push_back(absl::StrFormat("      {\"rank\": %d, \"heartbeat\": %s, \"last_completed\": %d, "
                                  "\"last_completed_call\": %s, \"current_call\": %s, \"state\": %s}",
                                  b.rank, b.found ? "true" : "false", b.completed, Quote(b.last), Quote(b.current),
                                  Quote(b.state)));
    }
    j += absl::StrFormat("  \"hang\": {\n    \"sequence\": %d,\n    \"call\": %s,\n    \"never_joined\": %s,\n"
                         "    \"no_heartbeat\": %s,\n    \"heartbeat\": %s,\n    \"ranks\": [\n%s\n    ]\n  },\n",
                         r.hang.sequence, Quote(r.hang.call), Ints(r.hang.never_joined), Ints(r.hang.no_heartbeat),
                         Quote(r.hang.channel), absl::StrJoin(v, ",\n"));
  } else {
    j += "  \"hang\": null,\n";
  }
  v.clear();
  for (const std::string& e : r.errors) v.push_back(Quote(e));
  j += "  \"errors\": [" + absl::StrJoin(v, ", ") + "],\n";
  v.clear();
  for (const std::string& l : Summary(r)) v.push_back("    " + Quote(l));
  j += "  \"summary\": [\n" + absl::StrJoin(v, ",\n") + "\n  ]\n}\n";
  std::ofstream f(path);
  if (!f) return weft::SystemError("--json %s: cannot write it", path);
  f << j;
  if (!f.good()) return weft::SystemError("--json %s: writing it failed", path);
  return absl::OkStatus();
}

}  // namespace weft_check
