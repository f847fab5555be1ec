// Correctness with attribution: every collective checked element by
// element on every rank, each rank's findings gathered to all.
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/check/phases.h"
#include "core/status.h"

namespace weft_check {

namespace {

weftResult_t Issue(Coll c, const Pattern& p, const void* send, void* recv, int iter, weftComm_t comm) {
  switch (c) {
    case Coll::kAllReduce: return weftAllReduce(send, recv, p.send_count(), p.dtype(), weftSum, comm, nullptr);
    case Coll::kReduceScatter:
      return weftReduceScatter(send, recv, p.recv_count(), p.dtype(), weftSum, comm, nullptr);
    case Coll::kAllGather: return weftAllGather(send, recv, p.send_count(), p.dtype(), comm, nullptr);
    case Coll::kBroadcast: return weftBroadcast(send, recv, p.send_count(), p.dtype(), p.root(iter), comm, nullptr);
  }
  return weftInvalidArgument;
}

// The elements a collective of `bytes` moves per rank (reduce-scatter and
// all-gather: per block), at least one.
size_t CountFor(Coll c, size_t bytes, size_t es, int n) {
  size_t count = bytes / es;
  if (c == Coll::kReduceScatter || c == Coll::kAllGather) count /= static_cast<size_t>(n);
  return count == 0 ? 1 : count;
}

}  // namespace

absl::StatusOr<Verdict> CheckOn(Rank& r, weftComm_t comm, int n, int me, Coll c, size_t bytes, int iters) {
  const Pattern probe(c, n, r.options().seed, 1);
  const Pattern p(c, n, r.options().seed, CountFor(c, bytes, probe.element_size(), n));
  std::vector<unsigned char> send(p.send_count() * p.element_size());
  std::vector<unsigned char> recv(p.recv_count() * p.element_size());
  Verdict total;
  total.suspects.assign(n, true);
  for (int it = 0; it < iters; ++it) {
    p.Fill(send.data(), me, it);
    std::memset(recv.data(), 0xff, recv.size());  // NaN: an element nobody writes is wrong
    RETURN_IF_ERROR(r.Call(absl::StrFormat("%s %zu B #%d", Name(c), bytes, it),
                           [&] { return Issue(c, p, send.data(), recv.data(), it, comm); }));
    const Verdict v = p.Check(recv.data(), me, it);
    if (v.wrong == 0) continue;
    if (total.wrong == 0) total.first = absl::StrFormat("iteration %d, %s", it, v.first);
    total.wrong += v.wrong;
    for (int q = 0; q < n; ++q) total.suspects[q] = total.suspects[q] && v.suspects[q];
  }
  if (total.wrong == 0) total.suspects.assign(n, false);
  return total;
}

absl::Status RunCorrectness(Rank& r, Report* out) {
  const Plan& plan = r.options().plan;
  const int n = r.nranks();
  std::vector<std::string> mine;
  std::vector<CheckRow> rows;  // into the report once every rank's findings are in
  for (Coll c : kColls) {
    for (size_t bytes : plan.check_bytes) {
      ASSIGN_OR_RETURN(const Verdict v, CheckOn(r, r.world(), n, r.rank(), c, bytes, plan.check_iters));
      std::vector<int> suspects;
      for (int q = 0; q < n; ++q) {
        if (v.suspects[q]) suspects.push_back(q);
      }
      mine.push_back(absl::StrFormat("%d\t%s\t%s", v.wrong, absl::StrJoin(suspects, ","), v.first));
      CheckRow row;
      row.collective = Name(c);
      row.dtype = Pattern(c, n, 0, 1).dtype() == weftFloat32 ? "float32" : "float64";
      row.bytes = bytes;
      row.iterations = plan.check_iters;
      rows.push_back(row);
    }
  }
  ASSIGN_OR_RETURN(std::vector<std::string> all, r.Gather(absl::StrJoin(mine, "\n"), "gathering the checks"));
  for (CheckRow& row : rows) {
    row.wrong.assign(n, 0);
    row.first.assign(n, "");
    row.suspects.assign(n, {});
  }
  for (int q = 0; q < n; ++q) {
    const std::vector<std::string> lines = absl::StrSplit(all[q], '\n');
    if (lines.size() != rows.size()) {
      return weft::InternalError("rank %d reported %zu checks, not %zu", q, lines.size(), rows.size());
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::vector<std::string> f = absl::StrSplit(lines[i], absl::MaxSplits('\t', 2));
      CheckRow& row = rows[i];
      if (f.size() != 3 || !absl::SimpleAtoi(f[0], &row.wrong[q])) {
        return weft::InternalError("rank %d's check %zu does not parse: '%s'", q, i, lines[i]);
      }
      for (absl::string_view s : absl::StrSplit(f[1], ',', absl::SkipEmpty())) {
        int k = 0;
        if (absl::SimpleAtoi(s, &k)) row.suspects[q].push_back(k);
      }
      row.first[q] = f[2];
    }
  }
  out->correctness = std::move(rows);
  return absl::OkStatus();
}

}  // namespace weft_check
