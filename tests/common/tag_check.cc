#include "tests/common/tag_check.h"

#include <deque>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/stream.h"
#include "tests/common/p2p_check.h"

namespace weft {
namespace testing {
namespace {

// One message of a check: its number (for its payload), tag, type and count.
struct Msg {
  int id;
  int tag;
  DataType t;
  size_t count;
};

// Sends `m` to `to`. Inside a group or on a host stream the send reads its
// buffer later: `keep` holds it until then.
absl::Status SendMsg(Communicator& comm, uint64_t seed, int to, const Msg& m, void* stream = nullptr,
                     std::deque<std::vector<unsigned char>>* keep = nullptr) {
  std::deque<std::vector<unsigned char>> local;
  std::deque<std::vector<unsigned char>>& out = keep != nullptr ? *keep : local;
  out.push_back(Payload(seed, comm.rank(), to, m.id, m.count, m.t));
  return comm.SendTagged(out.back().data(), m.count, m.t, to, m.tag, stream);
}

// A receive's buffer, poisoned, and what it must hold once the message is in.
struct Inbox {
  Inbox(uint64_t seed, int from, int to, const Msg& m)
      : msg(m), buf(m.count * ElementSize(m.t), kPoison), want(Payload(seed, from, to, m.id, m.count, m.t)),
        what(absl::StrCat("message ", m.id, " (", m.count, " ", Name(m.t), ", tag ", m.tag, ") from rank ", from)) {}
  absl::Status Recv(Communicator& comm, int from, void* stream = nullptr) {
    return comm.RecvTagged(buf.data(), msg.count, msg.t, from, msg.tag, stream);
  }
  std::string Check() const { return Compare(buf.data(), want, what); }
  Msg msg;
  std::vector<unsigned char> buf;
  std::vector<unsigned char> want;
  std::string what;
};

std::string Failed(const char* what, int rank, const std::string& err) {
  return err.empty() ? "" : absl::StrCat(what, " on rank ", rank, ":", err);
}

std::string Error(const std::string& what, const absl::Status& s) {
  return absl::StrCat("\n  ", what, ": ", s.ToString());
}

// Sends `msgs` to `to` in order, then receives them from `from` in the
// order `take` lists them (indices into msgs).
std::string SendThenTake(Communicator& comm, uint64_t seed, int to, int from, const std::vector<Msg>& msgs,
                         const std::vector<size_t>& take) {
  for (const Msg& m : msgs) {
    const absl::Status s = SendMsg(comm, seed, to, m);
    if (!s.ok()) return Error(absl::StrCat("send of message ", m.id), s);
  }
  std::string err;
  for (size_t i : take) {
    Inbox in(seed, from, comm.rank(), msgs[i]);
    const absl::Status s = in.Recv(comm, from);
    err += s.ok() ? in.Check() : Error(in.what, s);
  }
  return err;
}

std::string OutOfOrder(Communicator& comm, uint64_t seed, int next, int prev) {
  const std::vector<Msg> msgs = {{0, 1, DataType::kFloat32, 70000}, {1, 2, DataType::kInt32, 5},
                                 {2, 0, DataType::kUint8, 300}};
  std::string err = SendThenTake(comm, seed, next, prev, msgs, {1, 2, 0});
  // Twenty rendezvous-sized messages on tag 3, then one on tag 4, taken first.
  std::vector<Msg> many;
  std::vector<size_t> take = {20};
  for (int k = 0; k < 20; ++k) {
    many.push_back({10 + k, 3, DataType::kFloat32, 16384});
    take.push_back(static_cast<size_t>(k));
  }
  many.push_back({30, 4, DataType::kFloat64, 9});
  return err + SendThenTake(comm, seed, next, prev, many, take);
}

// Users' tags 0..3 are the lanes' tags of a collective's exchange inside
// MPI and UCX: messages on them stay in flight while collectives run.
std::string AcrossCollectives(Communicator& comm, uint64_t seed, int next, int prev) {
  const int n = comm.size();
  std::vector<Msg> msgs;
  for (int tag = 0; tag < 4; ++tag) msgs.push_back({40 + tag, tag, DataType::kInt32, static_cast<size_t>(3 + tag)});
  for (const Msg& m : msgs) {
    const absl::Status s = SendMsg(comm, seed, next, m);
    if (!s.ok()) return Error("send before the collectives", s);
  }
  std::vector<int32_t> out(static_cast<size_t>(n) * 4), in(out.size(), -1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = comm.rank() * 1000 + static_cast<int32_t>(i);
  absl::Status s = comm.AllToAll(out.data(), in.data(), 4, DataType::kInt32, nullptr);
  int32_t one = 1, sum = 0;
  if (s.ok()) s = comm.AllReduce(&one, &sum, 1, DataType::kInt32, RedOp::kSum, nullptr);
  if (!s.ok()) return Error("collectives with tagged messages in flight", s);
  std::string err;
  if (sum != n) err += absl::StrCat("\n  all_reduce gave ", sum, ", want ", n);
  for (int q = 0; q < n; ++q) {
    for (size_t j = 0; j < 4; ++j) {
      const int32_t want = q * 1000 + comm.rank() * 4 + static_cast<int32_t>(j);
      if (in[static_cast<size_t>(q) * 4 + j] != want) err += absl::StrCat("\n  all_to_all block ", q, " wrong");
    }
  }
  for (int k = 3; k >= 0; --k) {
    Inbox box(seed, prev, comm.rank(), msgs[static_cast<size_t>(k)]);
    s = box.Recv(comm, prev);
    err += s.ok() ? box.Check() : Error(box.what, s);
  }
  return err;
}

// Send and Recv are tag 0: either form matches the other.
std::string TagZeroIsPlain(Communicator& comm, uint64_t seed, int next, int prev) {
  const Msg a{50, 0, DataType::kBfloat16, 33}, b{51, 0, DataType::kInt64, 4};
  const std::vector<unsigned char> out = Payload(seed, comm.rank(), next, a.id, a.count, a.t);
  absl::Status s = comm.Send(out.data(), a.count, a.t, next, nullptr);
  if (s.ok()) s = SendMsg(comm, seed, next, b);
  if (!s.ok()) return Error("send on tag 0", s);
  Inbox first(seed, prev, comm.rank(), a), second(seed, prev, comm.rank(), b);
  s = first.Recv(comm, prev);
  if (s.ok()) s = comm.Recv(second.buf.data(), b.count, b.t, prev, nullptr);
  return s.ok() ? first.Check() + second.Check() : Error("recv on tag 0", s);
}

std::string InGroupAndOnStream(Communicator& comm, uint64_t seed, int next, int prev) {
  const Msg a{60, 5, DataType::kFloat32, 200003}, b{61, 6, DataType::kFloat16, 11};
  Inbox in_a(seed, prev, comm.rank(), a), in_b(seed, prev, comm.rank(), b);
  std::deque<std::vector<unsigned char>> keep;
  absl::Status s = Communicator::GroupStart();
  if (s.ok()) s = in_b.Recv(comm, prev);
  if (s.ok()) s = in_a.Recv(comm, prev);
  if (s.ok()) s = SendMsg(comm, seed, next, a, nullptr, &keep);
  if (s.ok()) s = SendMsg(comm, seed, next, b, nullptr, &keep);
  const absl::Status ended = Communicator::GroupEnd();
  if (!s.ok() || !ended.ok()) return Error("a group of tagged calls", s.ok() ? ended : s);
  std::string err = in_a.Check() + in_b.Check();
  // On a host stream: sends on tags 8 and 9, receives on 9 then 8.
  const Msg c{62, 8, DataType::kInt8, 1000}, d{63, 9, DataType::kFloat64, 3};
  Inbox in_c(seed, prev, comm.rank(), c), in_d(seed, prev, comm.rank(), d);
  HostStream stream;
  s = SendMsg(comm, seed, next, c, &stream, &keep);
  if (s.ok()) s = SendMsg(comm, seed, next, d, &stream, &keep);
  if (s.ok()) s = in_d.Recv(comm, prev, &stream);
  if (s.ok()) s = in_c.Recv(comm, prev, &stream);
  const absl::Status done = stream.Synchronize();
  if (!s.ok() || !done.ok()) return err + Error("tagged calls on a host stream", s.ok() ? done : s);
  return err + in_c.Check() + in_d.Check();
}

// Receives posted before anything is sent, each on a host stream of its
// own, then an all-reduce and the sends on another: a receive waiting for
// its message holds back no call issued after it (the all-reduce and the
// sends run, and so the messages come). The two receives on tag 11 from
// one rank, on two streams, still take its messages in the order issued;
// the third, from any rank, names the sender.
std::string ReceivesBeforeSends(Communicator& comm, uint64_t seed, int next, int prev) {
  const int n = comm.size(), r = comm.rank();
  const Msg a{80, 11, DataType::kFloat32, 100003}, b{81, 11, DataType::kInt32, 5}, c{82, 12, DataType::kUint8, 999};
  Inbox in_a(seed, prev, r, a), in_b(seed, prev, r, b), in_c(seed, prev, r, c);
  int source = -7;
  HostStream first, second, third, calls;
  absl::Status s = in_a.Recv(comm, prev, &first);
  if (s.ok()) s = in_b.Recv(comm, prev, &second);
  if (s.ok()) s = comm.RecvAnySource(in_c.buf.data(), c.count, c.t, c.tag, &source, &third);
  std::vector<int32_t> sum(3, r + 1);
  if (s.ok()) s = comm.AllReduce(sum.data(), sum.data(), sum.size(), DataType::kInt32, RedOp::kSum, &calls);
  std::deque<std::vector<unsigned char>> keep;
  for (const Msg* m : {&c, &a, &b}) {
    if (s.ok()) s = SendMsg(comm, seed, next, *m, &calls, &keep);
  }
  absl::Status done = absl::OkStatus();
  for (HostStream* stream : {&calls, &third, &second, &first}) {
    const absl::Status synced = stream->Synchronize();
    if (done.ok()) done = synced;
  }
  if (!s.ok() || !done.ok()) return Error("receives issued before the sends", s.ok() ? done : s);
  std::string err = in_a.Check() + in_b.Check() + in_c.Check();
  if (source != prev) err += absl::StrCat("\n  the receive from any rank reported ", source, ", not ", prev);
  for (int32_t v : sum) {
    if (v != n * (n + 1) / 2) err += absl::StrCat("\n  the all-reduce between gave ", v, ", not ", n * (n + 1) / 2);
  }
  return err;
}

// Two receives from one rank on two tags, each on its stream: the second's
// message is sent first, and the first's only once the second has arrived.
// A receive waits only for the earlier ones that could take its message,
// so the second completes while the first still waits.
std::string LaterReceiveFirst(Communicator& comm, uint64_t seed, int next, int prev) {
  const int r = comm.rank();
  const Msg a{90, 13, DataType::kFloat64, 70001}, b{91, 14, DataType::kInt8, 17};
  Inbox in_a(seed, prev, r, a), in_b(seed, prev, r, b);
  HostStream first, second, calls;
  std::deque<std::vector<unsigned char>> keep;
  absl::Status s = in_a.Recv(comm, prev, &first);
  if (s.ok()) s = in_b.Recv(comm, prev, &second);
  if (s.ok()) s = SendMsg(comm, seed, next, b, &calls, &keep);
  if (s.ok()) s = second.Synchronize();
  if (s.ok()) s = SendMsg(comm, seed, next, a, &calls, &keep);
  for (HostStream* stream : {&calls, &first, &second}) {
    const absl::Status synced = stream->Synchronize();
    if (s.ok()) s = synced;
  }
  if (!s.ok()) return Error("a later receive whose message comes first", s);
  return in_a.Check() + in_b.Check();
}

std::string TagRange(Communicator& comm, uint64_t seed) {
  std::string err;
  float x = 1;
  for (int tag : {-1, kMaxTag + 1}) {
    const std::string name = absl::StrCat("tag = ", tag);
    const absl::Status sent = comm.SendTagged(&x, 1, DataType::kFloat32, comm.rank(), tag, nullptr);
    const absl::Status got = comm.RecvTagged(&x, 1, DataType::kFloat32, comm.rank(), tag, nullptr);
    for (const absl::Status& s : {sent, got}) {
      if (!absl::IsInvalidArgument(s) || !absl::StrContains(s.message(), name)) {
        err += absl::StrCat("\n  ", name, " gave ", s.ToString(), ", want INVALID_ARGUMENT naming it");
      }
    }
  }
  const Msg top{70, kMaxTag, DataType::kUint8, 17};
  return err + SendThenTake(comm, seed, comm.rank(), comm.rank(), {top}, {0});
}

// Rank q sends `m` with id m.id + q to rank 0: the message of q in a piece
// of the any-source checks.
Msg Of(const Msg& m, int q) { return {m.id + q, m.tag, m.t, m.count}; }

// A receive from any source: its buffer, poisoned, and the sender it reports.
struct AnyInbox {
  absl::Status Recv(Communicator& comm, const Msg& m, void* stream = nullptr) {
    buf.assign(m.count * ElementSize(m.t), kPoison);
    return comm.RecvAnySource(buf.data(), m.count, m.t, m.tag, &source, stream);
  }
  std::vector<unsigned char> buf;
  int source = -7;
};

// After rank 0's receives of a piece completed: every rank but `skip` in
// exactly one box, each box holding its sender's message.
std::string EachOnce(Communicator& comm, uint64_t seed, const Msg& m, const std::deque<AnyInbox>& boxes,
                     int skip = -1) {
  std::string err;
  std::vector<int> seen(static_cast<size_t>(comm.size()), 0);
  for (const AnyInbox& b : boxes) {
    if (b.source < 0 || b.source >= comm.size() || b.source == skip) {
      err += absl::StrCat("\n  tag ", m.tag, ": a receive reported source ", b.source);
      continue;
    }
    ++seen[static_cast<size_t>(b.source)];
    const Msg sent = Of(m, b.source);
    err += Compare(b.buf.data(), Payload(seed, b.source, 0, sent.id, sent.count, sent.t),
                   absl::StrCat("tag ", m.tag, ": the message reported from rank ", b.source));
  }
  for (int q = 0; q < comm.size(); ++q) {
    const int want = q == skip ? 0 : 1;
    if (seen[static_cast<size_t>(q)] != want) {
      err += absl::StrCat("\n  tag ", m.tag, ": rank ", q, " reported ", seen[static_cast<size_t>(q)], " times");
    }
  }
  return err;
}

// Every rank sends Of(m, rank) to rank 0, which takes one from each rank by
// any source (with `named` >= 0, that rank's by name first).
std::string OneFromEach(Communicator& comm, uint64_t seed, const Msg& m, int named = -1) {
  const absl::Status sent = SendMsg(comm, seed, 0, Of(m, comm.rank()));
  if (!sent.ok()) return Error("send to rank 0", sent);
  if (comm.rank() != 0) return "";
  std::string err;
  if (named >= 0) {
    Inbox in(seed, named, 0, Of(m, named));
    const absl::Status s = in.Recv(comm, named);
    err += s.ok() ? in.Check() : Error(in.what, s);
  }
  std::deque<AnyInbox> boxes(static_cast<size_t>(comm.size() - (named >= 0 ? 1 : 0)));
  for (AnyInbox& b : boxes) {
    const absl::Status s = b.Recv(comm, m);
    if (!s.ok()) return err + Error(absl::StrCat("recv from any source on tag ", m.tag), s);
  }
  return err + EachOnce(comm, seed, m, boxes, named);
}

// Two messages from every rank on one tag, one on another tag: rank 0 takes
// the first tag's by any source (each sender's in its order), then the other
// tag's by name.
std::string SendersKeepTheirOrder(Communicator& comm, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  const Msg other{400 + r, 31, DataType::kInt32, 4};
  absl::Status s = SendMsg(comm, seed, 0, other);
  for (int k = 0; k < 2 && s.ok(); ++k) s = SendMsg(comm, seed, 0, {300 + 2 * r + k, 30, DataType::kInt64, 9});
  if (!s.ok()) return Error("send to rank 0", s);
  if (r != 0) return "";
  std::string err;
  std::vector<int> next(static_cast<size_t>(n), 0);
  for (int i = 0; i < 2 * n; ++i) {
    AnyInbox b;
    s = b.Recv(comm, {0, 30, DataType::kInt64, 9});
    if (!s.ok()) return Error("recv from any source on tag 30", s);
    if (b.source < 0 || b.source >= n || next[static_cast<size_t>(b.source)] == 2) {
      return err + absl::StrCat("\n  tag 30: a receive reported source ", b.source);
    }
    const int k = next[static_cast<size_t>(b.source)]++;
    err += Compare(b.buf.data(), Payload(seed, b.source, 0, 300 + 2 * b.source + k, 9, DataType::kInt64),
                   absl::StrCat("tag 30: message ", k, " of rank ", b.source));
  }
  for (int q = 0; q < n; ++q) {
    Inbox in(seed, q, 0, {400 + q, 31, DataType::kInt32, 4});
    s = in.Recv(comm, q);
    err += s.ok() ? in.Check() : Error(in.what, s);
  }
  return err;
}

// Inside a group, the receives before the sends; on a host stream (where
// rank 0's own send must come before its receives: the stream runs them in
// order), the sender reported once the stream has synchronised.
std::string AnySourceInGroupAndOnStream(Communicator& comm, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  std::string err;
  std::deque<std::vector<unsigned char>> keep;
  for (const bool group : {true, false}) {
    const Msg m = group ? Msg{500, 32, DataType::kFloat32, 200003} : Msg{600, 33, DataType::kBfloat16, 1000};
    HostStream stream;
    void* on = group ? nullptr : &stream;
    std::deque<AnyInbox> boxes(r == 0 ? static_cast<size_t>(n) : 0);
    absl::Status s = group ? Communicator::GroupStart() : SendMsg(comm, seed, 0, Of(m, r), on, &keep);
    for (AnyInbox& b : boxes) {
      if (s.ok()) s = b.Recv(comm, m, on);
    }
    if (s.ok() && group) s = SendMsg(comm, seed, 0, Of(m, r), on, &keep);
    const absl::Status ended = group ? Communicator::GroupEnd() : stream.Synchronize();
    const char* what = group ? "any source in a group" : "any source on a stream";
    if (!s.ok() || !ended.ok()) return Error(what, s.ok() ? ended : s);
    if (r == 0) err += EachOnce(comm, seed, m, boxes);
  }
  return err;
}

// A NULL source, count 0, and a bad tag, on every rank (to itself).
std::string AnySourceEdges(Communicator& comm, uint64_t seed) {
  const Msg m{700 + comm.rank(), 34, DataType::kFloat64, 3};
  absl::Status s = SendMsg(comm, seed, comm.rank(), m);
  std::vector<unsigned char> buf(m.count * 8, kPoison);
  if (s.ok()) s = comm.RecvAnySource(buf.data(), m.count, m.t, m.tag, nullptr, nullptr);
  if (!s.ok()) return Error("recv from any source with a NULL source", s);
  std::string err = Compare(buf.data(), Payload(seed, comm.rank(), comm.rank(), m.id, m.count, m.t), "NULL source");
  int source = 5;
  s = comm.RecvAnySource(nullptr, 0, DataType::kFloat32, 35, &source, nullptr);
  if (!s.ok() || source != -1) err += absl::StrCat("\n  count 0: ", s.ToString(), ", source ", source);
  source = 77;
  s = comm.RecvAnySource(buf.data(), 1, DataType::kFloat32, -1, &source, nullptr);
  if (!absl::IsInvalidArgument(s) || !absl::StrContains(s.message(), "tag = -1") || source != 77) {
    err += absl::StrCat("\n  tag -1: ", s.ToString(), ", source ", source, " (want it left at 77)");
  }
  return err;
}

}  // namespace

std::string CheckAnySource(Communicator& comm, uint64_t seed) {
  std::string err = OneFromEach(comm, seed, {100, 20, DataType::kFloat32, 70000});
  if (err.empty()) err = SendersKeepTheirOrder(comm, seed);
  if (err.empty() && comm.size() > 1) err = OneFromEach(comm, seed, {200, 21, DataType::kUint8, 50}, /*named=*/1);
  if (err.empty()) err = AnySourceInGroupAndOnStream(comm, seed);
  if (err.empty()) err = AnySourceEdges(comm, seed);
  return Failed("any source", comm.rank(), err);
}

std::string CheckTags(Communicator& comm, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  std::string err = OutOfOrder(comm, seed, next, prev);
  if (err.empty()) err = AcrossCollectives(comm, seed, next, prev);
  if (err.empty()) err = TagZeroIsPlain(comm, seed, next, prev);
  if (err.empty()) err = InGroupAndOnStream(comm, seed, next, prev);
  if (err.empty()) err = ReceivesBeforeSends(comm, seed, next, prev);
  if (err.empty()) err = LaterReceiveFirst(comm, seed, next, prev);
  if (err.empty()) err = TagRange(comm, seed);
  return Failed("tags", r, err);
}

}  // namespace testing
}  // namespace weft
