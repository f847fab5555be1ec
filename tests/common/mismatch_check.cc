#include "tests/common/mismatch_check.h"

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft {
namespace testing {
namespace {

constexpr int kMaxFailedPairs = 3;

enum class What { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier, kReduce, kGather, kScatter, kAllToAll };

struct Variant {
  What what;
  size_t count;
  DataType t;
  RedOp op;
  int root;  // taken modulo the communicator's size
  const char* name;
};

// One thing changed at a time from the first, and a large message (several
// shared-memory rounds and ring segments) changed in op and count.
const Variant kVariants[] = {
    {What::kAllReduce, 1000, DataType::kFloat32, RedOp::kSum, 0, "all_reduce 1000 float32 sum"},
    {What::kAllReduce, 1500, DataType::kFloat32, RedOp::kSum, 0, "all_reduce 1500 float32 sum"},
    {What::kAllReduce, 999, DataType::kFloat32, RedOp::kSum, 0, "all_reduce 999 float32 sum"},
    {What::kAllReduce, 1000, DataType::kFloat64, RedOp::kSum, 0, "all_reduce 1000 float64 sum"},
    {What::kAllReduce, 1000, DataType::kFloat32, RedOp::kMax, 0, "all_reduce 1000 float32 max"},
    {What::kAllReduce, 1000, DataType::kInt32, RedOp::kSum, 0, "all_reduce 1000 int32 sum"},
    {What::kAllReduce, 300000, DataType::kFloat32, RedOp::kSum, 0, "all_reduce 300000 float32 sum"},
    {What::kAllReduce, 300000, DataType::kFloat32, RedOp::kMax, 0, "all_reduce 300000 float32 max"},
    {What::kAllReduce, 299999, DataType::kFloat32, RedOp::kSum, 0, "all_reduce 299999 float32 sum"},
    {What::kReduceScatter, 1000, DataType::kFloat32, RedOp::kSum, 0, "reduce_scatter 1000 float32 sum"},
    {What::kAllGather, 1000, DataType::kFloat32, RedOp::kSum, 0, "all_gather 1000 float32"},
    {What::kBroadcast, 1000, DataType::kFloat32, RedOp::kSum, 0, "broadcast 1000 float32 root 0"},
    {What::kBroadcast, 1000, DataType::kFloat32, RedOp::kSum, 1, "broadcast 1000 float32 root 1"},
    {What::kBroadcast, 300000, DataType::kFloat32, RedOp::kSum, 1, "broadcast 300000 float32 root 1"},
    {What::kBarrier, 0, DataType::kUint8, RedOp::kSum, 0, "barrier"},
    {What::kReduce, 1000, DataType::kFloat32, RedOp::kSum, 0, "reduce 1000 float32 sum root 0"},
    {What::kReduce, 1000, DataType::kFloat32, RedOp::kSum, 1, "reduce 1000 float32 sum root 1"},
    {What::kGather, 1000, DataType::kFloat32, RedOp::kSum, 0, "gather 1000 float32 root 0"},
    {What::kScatter, 1000, DataType::kFloat32, RedOp::kSum, 0, "scatter 1000 float32 root 0"},
    {What::kAllToAll, 1000, DataType::kFloat32, RedOp::kSum, 0, "all_to_all 1000 float32"},
    {What::kAllToAll, 999, DataType::kFloat32, RedOp::kSum, 0, "all_to_all 999 float32"},
};

// Big enough for any variant on any rank: count elements of 8 bytes per rank.
struct Buffers {
  explicit Buffers(int size) : bytes(300000 * 8 * static_cast<size_t>(size)), send(bytes), recv(bytes) {
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<unsigned char>(1 + i % 13);  // small, finite
    std::memset(recv.data(), 0xa5, recv.size());
  }
  size_t bytes;
  std::vector<unsigned char> send, recv;
};

absl::Status Run(Communicator& c, const Variant& v, Buffers& b) {
  const int root = v.root % c.size();
  const void* in = b.send.data();
  void* out = b.recv.data();
  switch (v.what) {
    case What::kAllReduce: return c.AllReduce(in, out, v.count, v.t, v.op, nullptr);
    case What::kReduceScatter: return c.ReduceScatter(in, out, v.count, v.t, v.op, nullptr);
    case What::kAllGather: return c.AllGather(in, out, v.count, v.t, nullptr);
    case What::kBroadcast: return c.Broadcast(in, out, v.count, v.t, root, nullptr);
    case What::kBarrier: return c.Barrier();
    case What::kReduce: return c.Reduce(in, out, v.count, v.t, v.op, root, nullptr);
    case What::kGather: return c.Gather(in, out, v.count, v.t, root, nullptr);
    case What::kScatter: return c.Scatter(in, out, v.count, v.t, root, nullptr);
    case What::kAllToAll: return c.AllToAll(in, out, v.count, v.t, nullptr);
  }
  return absl::InternalError("unknown variant");
}

// Whether the two calls are the same call on a communicator of `size`.
bool Same(const Variant& a, const Variant& b, int size) {
  if (a.what == What::kBarrier && b.what == What::kBarrier) return true;
  return a.what == b.what && a.count == b.count && a.t == b.t && a.op == b.op && a.root % size == b.root % size;
}

// After a refused call: later calls fail (kRefused) or a matching one works (kGoesOn).
std::string After(Communicator& c, MismatchAfter after) {
  float x = 1.0f;
  const absl::Status s = c.AllReduce(&x, &x, 1, DataType::kFloat32, RedOp::kSum, nullptr);
  if (after == MismatchAfter::kRefused) {
    if (s.ok()) return "a later all_reduce succeeded on the communicator whose ranks disagreed";
    return "";
  }
  if (!s.ok() || x != static_cast<float>(c.size())) {
    return absl::StrFormat("the next matching all_reduce: %s, result %g", s.ToString(), x);
  }
  return "";
}

std::string CheckPair(Communicator& world, const Variant& common, const Variant& odd, MismatchAfter after,
                      Buffers& b) {
  absl::StatusOr<std::unique_ptr<Communicator>> sub = world.Split(0, world.rank());
  if (!sub.ok()) return absl::StrCat("split: ", sub.status().ToString());
  Communicator& c = **sub;
  const bool mine_odd = c.rank() == c.size() - 1;
  const Variant& v = mine_odd ? odd : common;
  const absl::Status s = Run(c, v, b);
  const std::string where = absl::StrFormat("rank %d (%s against %s on rank %d)", c.rank(), common.name, odd.name,
                                            c.size() - 1);
  if (s.ok()) return absl::StrCat(where, ": ", v.name, " succeeded");
  if (s.code() != absl::StatusCode::kFailedPrecondition) {
    return absl::StrCat(where, ": ", v.name, " gave ", s.ToString(), ", want InvalidUsage");
  }
  if (s.message().find("rank") == std::string::npos) {
    return absl::StrCat(where, ": the error names no rank: ", s.ToString());
  }
  const std::string a = After(c, after);
  return a.empty() ? "" : absl::StrCat(where, ": ", a);
}

// A receive that expects `want` elements of `wt` from rank 0, which sends
// 100 float32: the receiver fails with InvalidUsage. Small, so the send that
// nobody receives is delivered eagerly (an undelivered rendezvous would hold
// the sender's destroy for its timeout).
std::string CheckMessage(Communicator& world, size_t want, DataType wt, MismatchAfter after, Buffers& b) {
  absl::StatusOr<std::unique_ptr<Communicator>> sub = world.Split(0, world.rank());
  if (!sub.ok()) return absl::StrCat("split: ", sub.status().ToString());
  Communicator& c = **sub;
  const int last = c.size() - 1;
  std::string err;
  if (c.rank() == 0) {
    const absl::Status s = c.Send(b.send.data(), 100, DataType::kFloat32, last, nullptr);
    if (!s.ok()) err = absl::StrCat("rank 0: send: ", s.ToString());
  }
  if (c.rank() == last) {
    const absl::Status s = c.Recv(b.recv.data(), want, wt, 0, nullptr);
    const std::string where = absl::StrFormat("rank %d: recv of %d %s against a send of 100 float32", last, want,
                                              Name(wt));
    if (s.ok()) {
      err = absl::StrCat(where, " succeeded");
    } else if (s.code() != absl::StatusCode::kFailedPrecondition) {
      err = absl::StrCat(where, " gave ", s.ToString(), ", want InvalidUsage");
    } else if (after == MismatchAfter::kRefused) {
      const absl::Status next = c.Barrier();
      if (next.ok()) err = absl::StrCat(where, ": a later barrier succeeded on the receiver");
    }
  }
  // Nobody receives rank 0's data: its destroy would wait the timeout for
  // the send to be delivered, unless aborted. In-process ranks share one
  // world, where an abort would reach the receiver too: it comes once the
  // receiver is done.
  if (after == MismatchAfter::kRefused) {
    const absl::Status done = world.Barrier();
    if (!done.ok()) err += absl::StrCat("; the barrier after the receive: ", done.ToString());
    if (c.rank() == 0) c.Abort();
  }
  return err;
}

}  // namespace

std::string CheckMismatches(Communicator& world, MismatchAfter after) {
  if (world.size() < 2) return "";
  Buffers b(world.size());
  std::string err;
  int failed = 0;
  const size_t n = sizeof(kVariants) / sizeof(kVariants[0]);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (Same(kVariants[i], kVariants[j], world.size())) continue;
      std::string e = CheckPair(world, kVariants[i], kVariants[j], after, b);
      // Every rank stops at the same pair, once any has seen enough failures.
      int bad = e.empty() ? 0 : 1;
      const absl::Status agreed = world.AllReduce(&bad, &bad, 1, DataType::kInt32, RedOp::kMax, nullptr);
      if (!agreed.ok()) return absl::StrCat(err, "\nthe world's all_reduce after a pair: ", agreed.ToString());
      if (!e.empty()) absl::StrAppend(&err, "\n", e);
      if (bad != 0 && ++failed >= kMaxFailedPairs) return absl::StrCat(err, "\n(stopped after ", failed, " pairs)");
    }
  }
  const struct { size_t count; DataType t; } messages[] = {
      {99, DataType::kFloat32}, {150, DataType::kFloat32}, {100, DataType::kFloat64}, {100, DataType::kInt32}};
  for (const auto& m : messages) {
    std::string e = CheckMessage(world, m.count, m.t, after, b);
    int bad = e.empty() ? 0 : 1;
    const absl::Status agreed = world.AllReduce(&bad, &bad, 1, DataType::kInt32, RedOp::kMax, nullptr);
    if (!agreed.ok()) return absl::StrCat(err, "\nthe world's all_reduce after a message: ", agreed.ToString());
    if (!e.empty()) absl::StrAppend(&err, "\n", e);
  }
  return err;
}

}  // namespace testing
}  // namespace weft
