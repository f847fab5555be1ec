#include "comm/p2p/check.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/p2p/exchange.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

// The payload that marks Decide's refusals, so a caller can tell a mismatch
// (every rank failed at the same point) from a failure of the transport.
constexpr char kMismatchUrl[] = "weft/call-mismatch";

CallKind KindOf(const Call& c) { return static_cast<CallKind>(c.words[0] >> 16 & 0xff); }
DataType TypeOf(const Call& c) { return static_cast<DataType>(c.words[0] >> 8 & 0xff); }
RedOp OpOf(const Call& c) { return static_cast<RedOp>(c.words[0] & 0xff); }
uint32_t SeqOf(const Call& c) { return static_cast<uint32_t>(c.words[0] >> 32); }
int RootOf(const Call& c) { return static_cast<int>(c.words[2]) - 1; }

const char* KindName(CallKind k) {
  switch (k) {
    case CallKind::kAllReduce: return "all_reduce";
    case CallKind::kReduceScatter: return "reduce_scatter";
    case CallKind::kAllGather: return "all_gather";
    case CallKind::kBroadcast: return "broadcast";
    case CallKind::kBarrier: return "barrier";
    case CallKind::kReduce: return "reduce";
    case CallKind::kGather: return "gather";
    case CallKind::kScatter: return "scatter";
    case CallKind::kAllToAll: return "all_to_all";
    case CallKind::kAllReduceReady: return "all_reduce_ready";
    case CallKind::kSplit: return "split";
    case CallKind::kSend: return "send";
  }
  return "an unknown call";
}

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One (sender, receiver, count) term of the all-to-all sum.
uint64_t PairHash(size_t from, size_t to, size_t count) {
  return Mix(Mix((static_cast<uint64_t>(from) << 32) ^ static_cast<uint64_t>(to)) ^ static_cast<uint64_t>(count));
}

// Bruck's all-gather of Calls: known_[i] is rank (rank - i)'s call. At step
// s (d = 2^s) this rank sends known_[0, m) to rank + d and receives rank -
// d's known_[0, m) into known_[d, d + m), m = min(d, size - d): the same
// sizes on every rank whatever it called, so mismatched calls still match.
class GatherCalls final : public Schedule {
 public:
  GatherCalls(int rank, int size, const Call& mine) : rank_(rank), size_(size), known_(static_cast<size_t>(size)) {
    known_[0] = mine;
    while ((1 << steps_) < size) ++steps_;
  }
  size_t lanes() const override { return 1; }
  int steps() const override { return steps_; }
  Transfer Post(size_t, int, int step) override {
    const int d = 1 << step, m = std::min(d, size_ - d);
    Transfer x;
    x.to = (rank_ + d) % size_;
    x.from = (rank_ - d + size_) % size_;
    x.send = known_.data();
    x.recv = known_.data() + d;
    x.send_bytes = x.recv_bytes = static_cast<size_t>(m) * sizeof(Call);
    x.tag = kCheckTag;
    return x;
  }
  void Complete(size_t, int, int) override {}
  const Call& of(int q) const { return known_[static_cast<size_t>((rank_ - q + size_) % size_)]; }

 private:
  const int rank_, size_;
  int steps_ = 0;
  std::vector<Call> known_;
};

}  // namespace

Call MakeCall(CallKind kind, DataType t, size_t count, RedOp op, int root) {
  Call c;
  c.words[0] = static_cast<uint64_t>(kind) << 16 | static_cast<uint64_t>(t) << 8 | static_cast<uint64_t>(op);
  c.words[1] = count;
  c.words[2] = static_cast<uint64_t>(root + 1);
  return c;
}

Call MakeAllToAllCall(int rank, DataType t, const std::vector<size_t>& sendcounts,
                      const std::vector<size_t>& recvcounts) {
  Call c = MakeCall(CallKind::kAllToAll, t, 0);
  const auto me = static_cast<size_t>(rank);
  uint64_t share = 0;
  for (size_t q = 0; q < sendcounts.size(); ++q) {
    share += PairHash(me, q, sendcounts[q]) - PairHash(q, me, recvcounts[q]);
  }
  c.words[2] = share;
  return c;
}

Call Stamp(Call c, uint64_t seq) {
  c.words[0] = (c.words[0] & 0xffffffffULL) | (seq & 0xffffffffULL) << 32;
  return c;
}

std::string Describe(const Call& c) {
  const CallKind k = KindOf(c);
  const char* name = KindName(k);
  switch (k) {
    case CallKind::kBarrier:
    case CallKind::kSplit: return absl::StrFormat("%s()", name);
    case CallKind::kAllToAll:
    case CallKind::kAllReduceReady: return absl::StrFormat("%s(%s)", name, Name(TypeOf(c)));
    case CallKind::kAllReduce:
    case CallKind::kReduceScatter:
      return absl::StrFormat("%s(count %d, %s, %s)", name, c.words[1], Name(TypeOf(c)), Name(OpOf(c)));
    case CallKind::kReduce:
      return absl::StrFormat("%s(count %d, %s, %s, root %d)", name, c.words[1], Name(TypeOf(c)), Name(OpOf(c)),
                             RootOf(c));
    case CallKind::kBroadcast:
    case CallKind::kGather:
    case CallKind::kScatter:
      return absl::StrFormat("%s(count %d, %s, root %d)", name, c.words[1], Name(TypeOf(c)), RootOf(c));
    case CallKind::kAllGather:
    case CallKind::kSend: return absl::StrFormat("%s(count %d, %s)", name, c.words[1], Name(TypeOf(c)));
  }
  return absl::StrFormat("%s (fingerprint %016x %016x %016x)", name, c.words[0], c.words[1], c.words[2]);
}

absl::Status Decide(int rank, int size, absl::FunctionRef<Call(int)> call_of) {
  const Call zero = call_of(0);
  const bool all_to_all = KindOf(zero) == CallKind::kAllToAll;
  uint64_t share = all_to_all ? zero.words[2] : 0;
  absl::Status s;
  for (int q = 1; q < size && s.ok(); ++q) {
    const Call c = call_of(q);
    const bool same = c.words[0] == zero.words[0] && c.words[1] == zero.words[1] &&
                      (all_to_all || c.words[2] == zero.words[2]);
    share += c.words[2];
    if (same) continue;
    const std::string mine = Describe(c), theirs = Describe(zero);
    if (mine != theirs) {
      s = InvalidUsage("rank %d: the ranks called different collectives: rank %d called %s where rank 0 called %s",
                       rank, q, mine, theirs);
    } else {  // only the call numbers differ: one rank issued more collectives
      s = InvalidUsage("rank %d: the ranks are out of step: rank %d called %s as its collective number %d where "
                       "rank 0 called it as its number %d", rank, q, mine, SeqOf(c), SeqOf(zero));
    }
  }
  if (s.ok() && all_to_all && share != 0) {
    s = InvalidUsage("rank %d: the ranks called all_to_all(%s) with counts that do not match: some rank sends "
                     "another a block of a size that rank does not expect to receive", rank, Name(TypeOf(zero)));
  }
  if (s.ok()) return s;
  s = absl::Status(s.code(), absl::StrCat(s.message(), "; this communicator is now unusable"));
  s.SetPayload(kMismatchUrl, absl::Cord("1"));
  return s;
}

absl::Status CheckMessage(int rank, int from, int tag, const Call& expected, const Call& got) {
  if (got.words[0] == expected.words[0] && got.words[1] == expected.words[1]) return absl::OkStatus();
  if (KindOf(got) != CallKind::kSend) {
    return InvalidUsage("rank %d: a receive from rank %d on tag %d met a message that is no send's header; this "
                        "communicator is now unusable", rank, from, tag);
  }
  const std::string want =
      absl::StrFormat("recv(count %d, %s, tag %d)", expected.words[1], Name(TypeOf(expected)), tag);
  if (SeqOf(got) != SeqOf(expected)) {
    return InvalidUsage("rank %d: %s from rank %d as receive number %d of that tag met its send number %d; this "
                        "communicator is now unusable", rank, want, from, SeqOf(expected), SeqOf(got));
  }
  return InvalidUsage("rank %d called %s from rank %d, which called %s to it on that tag; this communicator is now "
                      "unusable", rank, want, from, Describe(got));
}

bool IsCallMismatch(const absl::Status& s) { return s.GetPayload(kMismatchUrl).has_value(); }

absl::Status CheckCall(const Engine& e, const Call& mine) {
  if (e.size == 1) return absl::OkStatus();
  GatherCalls s(e.rank, e.size, mine);
  RETURN_IF_ERROR(e.run(s, 1));
  return Decide(e.rank, e.size, [&](int q) { return s.of(q); });
}

bool CheckCalls() { return Env::Get().check_calls; }

}  // namespace p2p
}  // namespace weft
