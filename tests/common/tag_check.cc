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

}  // namespace

std::string CheckTags(Communicator& comm, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  std::string err = OutOfOrder(comm, seed, next, prev);
  if (err.empty()) err = AcrossCollectives(comm, seed, next, prev);
  if (err.empty()) err = TagZeroIsPlain(comm, seed, next, prev);
  if (err.empty()) err = InGroupAndOnStream(comm, seed, next, prev);
  if (err.empty()) err = TagRange(comm, seed);
  return Failed("tags", r, err);
}

}  // namespace testing
}  // namespace weft
