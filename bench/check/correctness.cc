// Correctness with attribution: every collective checked element by
// element on every rank, each rank's findings gathered to all.
#include <cstring>
#include <utility>
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

weftResult_t SendRecv(const Pattern& p, const void* send, void* recv, int me, int n, int iter, weftComm_t comm) {
  const weftDataType_t t = p.kind().dtype;
  const int k = p.shift(iter);
  weftResult_t res = weftGroupStart();
  if (res != weftSuccess) return res;
  res = weftSend(send, p.send_count(), t, (me + k) % n, comm, nullptr);
  if (res == weftSuccess) res = weftRecv(recv, p.recv_count(), t, (me - k + n) % n, comm, nullptr);
  const weftResult_t end = weftGroupEnd();  // the group is closed whatever went wrong inside it
  return res != weftSuccess ? res : end;
}

weftResult_t Issue(const Pattern& p, const void* send, void* recv, int me, int n, int iter, weftComm_t comm) {
  const Case& k = p.kind();
  const weftDataType_t t = k.dtype;
  switch (k.coll) {
    case Coll::kAllReduce: return weftAllReduce(send, recv, p.count(), t, k.op, comm, nullptr);
    case Coll::kReduceScatter: return weftReduceScatter(send, recv, p.count(), t, k.op, comm, nullptr);
    case Coll::kAllGather: return weftAllGather(send, recv, p.count(), t, comm, nullptr);
    case Coll::kBroadcast: return weftBroadcast(send, recv, p.count(), t, p.root(iter), comm, nullptr);
    case Coll::kReduce: return weftReduce(send, recv, p.count(), t, k.op, p.root(iter), comm, nullptr);
    case Coll::kGather: return weftGather(send, recv, p.count(), t, p.root(iter), comm, nullptr);
    case Coll::kScatter: return weftScatter(send, recv, p.count(), t, p.root(iter), comm, nullptr);
    case Coll::kAllToAll: return weftAllToAll(send, recv, p.count(), t, comm, nullptr);
    case Coll::kSendRecv: return SendRecv(p, send, recv, me, n, iter, comm);
  }
  return weftInvalidArgument;
}

// The elements a collective of `bytes` moves per rank (per block where it
// moves blocks), at least one.
size_t CountFor(Coll c, size_t bytes, size_t es, int n) {
  size_t count = bytes / es;
  if (c == Coll::kReduceScatter || c == Coll::kAllGather || c == Coll::kGather || c == Coll::kScatter ||
      c == Coll::kAllToAll) {
    count /= static_cast<size_t>(n);
  }
  return count == 0 ? 1 : count;
}

// One row of the report per case and size, in the order the ranks run them.
struct Planned {
  Case k;
  size_t bytes;
  int iters;
};

std::vector<Planned> Cases(const Options& o, int n) {
  std::vector<Planned> out;
  for (Coll c : kColls) {
    if (!o.Selected(c) || (c == Coll::kSendRecv && n < 2)) continue;  // one rank has no peer to send to
    for (size_t bytes : o.plan.check_bytes) out.push_back({Primary(c, n), bytes, o.plan.check_iters});
    for (const Case& k : Matrix(c, n)) {
      for (size_t bytes : o.plan.matrix_bytes) out.push_back({k, bytes, o.plan.matrix_iters});
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<Verdict> CheckOn(Rank& r, weftComm_t comm, int n, int me, const Case& k, size_t bytes, int iters) {
  const Pattern p(k, n, r.options().seed, CountFor(k.coll, bytes, TypeSize(k.dtype), n));
  const weftMemoryKind_t memory = r.options().memory;
  std::vector<unsigned char> send(p.send_count() * p.element_size());
  std::vector<unsigned char> recv(p.recv_count() * p.element_size());
  ASSIGN_OR_RETURN(const Buffer dsend, Buffer::Make(memory, send.size()));
  ASSIGN_OR_RETURN(const Buffer drecv, Buffer::Make(memory, recv.size()));
  Verdict total;
  total.suspects.assign(n, true);
  const std::string name = Reduces(k.coll) ? absl::StrFormat("%s %s %s", Name(k.coll), TypeName(k.dtype), OpName(k.op))
                                           : absl::StrFormat("%s %s", Name(k.coll), TypeName(k.dtype));
  for (int it = 0; it < iters; ++it) {
    p.Fill(send.data(), me, it);
    RETURN_IF_ERROR(dsend.Upload(send.data()));
    RETURN_IF_ERROR(drecv.Poison());  // NaN, -1 or 255: an element nobody writes is wrong
    RETURN_IF_ERROR(r.Call(absl::StrFormat("%s %zu B #%d", name, bytes, it),
                           [&] { return Issue(p, dsend.data(), drecv.data(), me, n, it, comm); }));
    RETURN_IF_ERROR(drecv.Download(recv.data()));
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
  const int n = r.nranks();
  std::vector<std::string> mine;
  std::vector<CheckRow> rows;  // into the report once every rank's findings are in
  for (const Planned& c : Cases(r.options(), n)) {
    ASSIGN_OR_RETURN(const Verdict v, CheckOn(r, r.world(), n, r.rank(), c.k, c.bytes, c.iters));
    std::vector<int> suspects;
    for (int q = 0; q < n; ++q) {
      if (v.suspects[q]) suspects.push_back(q);
    }
    mine.push_back(absl::StrFormat("%d\t%s\t%s", v.wrong, absl::StrJoin(suspects, ","), v.first));
    CheckRow row;
    row.collective = Name(c.k.coll);
    row.dtype = TypeName(c.k.dtype);
    row.op = Reduces(c.k.coll) ? OpName(c.k.op) : "";
    row.bytes = c.bytes;
    row.iterations = c.iters;
    rows.push_back(row);
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
