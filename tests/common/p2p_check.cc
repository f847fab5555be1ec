#include "tests/common/p2p_check.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/stream.h"

namespace weft {
namespace testing {
namespace {

constexpr size_t kGuard = 64;
constexpr size_t kBig = (size_t{1} << 20) + 3;

}  // namespace

std::vector<unsigned char> Payload(uint64_t seed, int from, int to, int msg, size_t count, DataType t) {
  const size_t es = ElementSize(t);
  std::vector<unsigned char> v(count * es);
  const uint64_t base = Mix(seed ^ (static_cast<uint64_t>(from) << 40) ^ (static_cast<uint64_t>(to) << 20) ^
                            static_cast<uint64_t>(msg));
  for (size_t i = 0; i < count; ++i) {
    const uint64_t u = Mix(base + i);
    unsigned char* p = v.data() + i * es;
    std::memcpy(p, &u, es);
    if (IsFloating(t)) {  // small integers: exact and finite in every float type
      const double x = static_cast<double>(1 + u % 200) * ((u >> 8) & 1 ? -1 : 1);
      switch (t) {
        case DataType::kFloat32: { const float f = static_cast<float>(x); std::memcpy(p, &f, 4); break; }
        case DataType::kFloat64: std::memcpy(p, &x, 8); break;
        case DataType::kFloat16: { const uint16_t h = DoubleToHalf(x); std::memcpy(p, &h, 2); break; }
        default: { const uint16_t b = DoubleToBf16(x); std::memcpy(p, &b, 2); break; }
      }
    } else if (std::all_of(p, p + es, [](unsigned char c) { return c == kPoison; })) {
      p[0] = 1;
    }
  }
  return v;
}

std::string Compare(const unsigned char* got, const std::vector<unsigned char>& want, const std::string& what) {
  if (want.empty() || std::memcmp(got, want.data(), want.size()) == 0) return "";
  size_t i = 0;
  while (got[i] == want[i]) ++i;
  return absl::StrCat("\n  ", what, ": byte ", i, " of ", want.size(), " is ", got[i], ", want ", want[i]);
}

namespace {

std::string GuardIntact(const std::vector<unsigned char>& buf, size_t from, const std::string& what) {
  for (size_t b = from; b < buf.size(); ++b) {
    if (buf[b] != kPoison) return absl::StrCat("\n  ", what, ": wrote past the message (byte ", b - from, " after)");
  }
  return "";
}

std::string Finish(const char* what, int rank, const std::string& err) {
  return err.empty() ? "" : absl::StrCat(what, " on rank ", rank, ":", err);
}

// Receives `count` of `t` from `from` as message `msg` and checks it.
std::string RecvAndCheck(Communicator& comm, uint64_t seed, int from, int msg, size_t count, DataType t,
                         void* stream = nullptr, std::vector<unsigned char>* keep = nullptr) {
  const size_t es = ElementSize(t);
  std::vector<unsigned char> local;
  std::vector<unsigned char>& buf = keep != nullptr ? *keep : local;
  buf.assign(count * es + kGuard, kPoison);
  const absl::Status s = comm.Recv(count == 0 ? nullptr : buf.data(), count, t, from, stream);
  const std::string what = absl::StrCat("recv of ", count, " ", Name(t), " from rank ", from, " (message ", msg, ")");
  if (!s.ok()) return absl::StrCat("\n  ", what, ": ", s.ToString());
  if (stream != nullptr) return "";  // checked after the stream synchronised
  return Compare(buf.data(), Payload(seed, from, comm.rank(), msg, count, t), what) +
         GuardIntact(buf, count * es, what);
}

}  // namespace

std::string CheckSendRecv(Communicator& comm, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  std::string err;
  int msg = 0;
  // 1. A ring exchange, everyone sending first.
  for (int ti = 0; ti < kNumDataTypes; ++ti) {
    const auto t = static_cast<DataType>(ti);
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, kBig}) {
      if (count == kBig && t != DataType::kFloat32) continue;
      const std::vector<unsigned char> out = Payload(seed, r, next, msg, count, t);
      const absl::Status s = comm.Send(count == 0 ? nullptr : out.data(), count, t, next, nullptr);
      if (!s.ok()) return Finish("send/recv", r, absl::StrCat("\n  send of ", count, " ", Name(t), ": ", s.ToString()));
      err += RecvAndCheck(comm, seed, prev, msg, count, t);
      ++msg;
    }
  }
  if (!err.empty()) return Finish("send/recv ring exchange", r, err);
  // 2. Three messages to one peer, matched in order; the first buffer is
  // overwritten as soon as its send returns (sends copy their bytes).
  const size_t sizes[3] = {5000, 3, 70000};
  for (int k = 0; k < 3; ++k) {
    std::vector<unsigned char> out = Payload(seed, r, next, msg + k, sizes[k], DataType::kInt32);
    const absl::Status s = comm.Send(out.data(), sizes[k], DataType::kInt32, next, nullptr);
    if (!s.ok()) return Finish("send/recv", r, absl::StrCat("\n  send ", k, ": ", s.ToString()));
    std::fill(out.begin(), out.end(), kPoison);
  }
  for (int k = 0; k < 3; ++k) err += RecvAndCheck(comm, seed, prev, msg + k, sizes[k], DataType::kInt32);
  msg += 3;
  // 3. To itself.
  {
    const std::vector<unsigned char> out = Payload(seed, r, r, msg, 77, DataType::kFloat64);
    const absl::Status s = comm.Send(out.data(), 77, DataType::kFloat64, r, nullptr);
    if (!s.ok()) return Finish("send/recv", r, "\n  send to itself: " + s.ToString());
    err += RecvAndCheck(comm, seed, r, msg++, 77, DataType::kFloat64);
  }
  // 4. On a host stream, then a blocking all-reduce: issue order holds.
  {
    HostStream stream;
    const std::vector<unsigned char> out = Payload(seed, r, next, msg, 3000, DataType::kBfloat16);
    std::vector<unsigned char> in;
    absl::Status s = comm.Send(out.data(), 3000, DataType::kBfloat16, next, &stream);
    if (!s.ok()) return Finish("send/recv", r, "\n  send on a stream: " + s.ToString());
    err += RecvAndCheck(comm, seed, prev, msg, 3000, DataType::kBfloat16, &stream, &in);
    int32_t one = 1, all = 0;
    s = comm.AllReduce(&one, &all, 1, DataType::kInt32, RedOp::kSum, nullptr);
    const absl::Status done = stream.Synchronize();
    if (!s.ok() || !done.ok() || all != n) {
      return Finish("send/recv", r, absl::StrCat("\n  on a stream: ", s.ToString(), " / ", done.ToString(), ", sum ",
                                                 all));
    }
    err += Compare(in.data(), Payload(seed, prev, r, msg, 3000, DataType::kBfloat16), "recv on a stream");
    ++msg;
  }
  return Finish("send/recv", r, err);
}

std::string CheckGroups(Communicator& comm, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  std::string err;
  const size_t count = 200003;  // well past any eager or direct threshold
  std::vector<unsigned char> from_prev(count * 4 + kGuard, kPoison), from_next(count * 4 + kGuard, kPoison);
  const std::vector<unsigned char> to_next = Payload(seed, r, next, 100, count, DataType::kFloat32);
  const std::vector<unsigned char> to_prev = Payload(seed, r, prev, 101, count, DataType::kFloat32);
  int32_t one = r + 1, sum = 0;
  // Receives first, then the sends and a collective; nested once.
  absl::Status s = Communicator::GroupStart();
  if (s.ok()) s = comm.Recv(from_prev.data(), count, DataType::kFloat32, prev, nullptr);
  if (s.ok()) s = comm.Recv(from_next.data(), count, DataType::kFloat32, next, nullptr);
  if (s.ok()) s = Communicator::GroupStart();
  if (s.ok()) s = comm.AllReduce(&one, &sum, 1, DataType::kInt32, RedOp::kSum, nullptr);
  if (s.ok()) s = comm.Send(to_next.data(), count, DataType::kFloat32, next, nullptr);
  if (s.ok()) s = Communicator::GroupEnd();  // inner: nothing runs yet
  if (s.ok() && sum != 0) err += "\n  a call ran before the outer group ended";
  if (s.ok()) s = comm.Send(to_prev.data(), count, DataType::kFloat32, prev, nullptr);
  // Refused at once, and the group goes on.
  const absl::Status bad = comm.Send(to_prev.data(), count, DataType::kFloat32, n, nullptr);
  if (!absl::IsInvalidArgument(bad)) err += "\n  a bad peer inside a group: " + bad.ToString();
  if (s.ok()) s = Communicator::GroupEnd();
  if (!s.ok()) return Finish("groups", r, "\n  " + s.ToString() + err);
  if (sum != n * (n + 1) / 2) err += absl::StrCat("\n  the group's all-reduce gave ", sum);
  // With two ranks prev == next: the two messages from it arrive in its send order (to_next, then to_prev).
  err += Compare(from_prev.data(), Payload(seed, prev, r, 100, count, DataType::kFloat32), "group recv from prev");
  err += Compare(from_next.data(), Payload(seed, next, r, 101, count, DataType::kFloat32), "group recv from next");
  const absl::Status lone = Communicator::GroupEnd();
  if (!absl::IsFailedPrecondition(lone) || !absl::StrContains(lone.message(), "no group")) {
    err += "\n  GroupEnd without GroupStart: " + lone.ToString();
  }
  return Finish("groups", r, err);
}

std::string CheckAllToAllv(Communicator& comm, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  const auto nn = static_cast<size_t>(n);
  std::string err;
  // Elements from rank a to rank b in case k; the last case has one large block per rank.
  const auto amount = [&](int a, int b, int k) -> size_t {
    if (k == 4) return a == b ? 0 : 50000 + static_cast<size_t>(a * 7 + b);
    return static_cast<size_t>(Mix(seed ^ static_cast<uint64_t>(a * 131 + b * 17 + k)) % 9);
  };
  const DataType types[] = {DataType::kFloat32, DataType::kBfloat16, DataType::kInt64, DataType::kUint8,
                            DataType::kFloat32};
  for (int k = 0; k < 5; ++k) {
    const DataType t = types[k];
    const size_t es = ElementSize(t);
    // Blocks laid out in reverse rank order with a gap of 3 elements before each.
    std::vector<size_t> sc(nn), sd(nn), rc(nn), rd(nn);
    size_t send_total = 0, recv_total = 0;
    for (int q = n - 1; q >= 0; --q) {
      const auto p = static_cast<size_t>(q);
      sc[p] = amount(r, q, k), rc[p] = amount(q, r, k);
      sd[p] = send_total + 3, rd[p] = recv_total + 3;
      send_total = sd[p] + sc[p], recv_total = rd[p] + rc[p];
    }
    std::vector<unsigned char> send(send_total * es, 0), recv(recv_total * es + kGuard, kPoison);
    for (int q = 0; q < n; ++q) {
      const std::vector<unsigned char> block = Payload(seed, r, q, 200 + k, sc[static_cast<size_t>(q)], t);
      if (!block.empty()) std::memcpy(send.data() + sd[static_cast<size_t>(q)] * es, block.data(), block.size());
    }
    HostStream stream;
    const bool on_stream = k % 2 == 1;
    absl::Status s = comm.AllToAllv(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), t,
                                    on_stream ? &stream : nullptr);
    const absl::Status done = stream.Synchronize();
    if (s.ok()) s = done;
    const std::string what = absl::StrCat("all_to_allv case ", k, " (", Name(t), ")");
    if (!s.ok()) return Finish("all_to_allv", r, absl::StrCat("\n  ", what, ": ", s.ToString()));
    std::vector<unsigned char> want(recv.size(), kPoison);  // the gaps and the guard stay poisoned
    for (int q = 0; q < n; ++q) {
      const std::vector<unsigned char> block = Payload(seed, q, r, 200 + k, rc[static_cast<size_t>(q)], t);
      if (!block.empty()) std::memcpy(want.data() + rd[static_cast<size_t>(q)] * es, block.data(), block.size());
    }
    err += Compare(recv.data(), want, what);
  }
  return Finish("all_to_allv", r, err);
}

std::string CheckRecvTimeout(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  if (n == 1 || r != n - 1) return "";
  std::string err;
  float x = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const absl::Status s = comm.Recv(&x, 1, DataType::kFloat32, 0, nullptr);
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  if (!absl::IsDeadlineExceeded(s) || !absl::StrContains(s.message(), "recv")) {
    err += "\n  a lone recv returned " + s.ToString() + ", expected DEADLINE_EXCEEDED naming recv";
  }
  if (waited > comm.options().timeout_ms + 10000) err += absl::StrCat("\n  the timeout took ", waited, " ms");
  // From any rank: the same timeout, naming what it waited for; no source.
  int source = 9;
  const absl::Status any = comm.RecvAnySource(&x, 1, DataType::kFloat32, 3, &source, nullptr);
  if (!absl::IsDeadlineExceeded(any) || !absl::StrContains(any.message(), "any rank on tag 3") || source != -1) {
    err += absl::StrCat("\n  a lone recv from any source returned ", any.ToString(), " and source ", source,
                        ", expected DEADLINE_EXCEEDED naming any rank and tag 3, and source -1");
  }
  return Finish("recv timeout", r, err);
}

}  // namespace testing
}  // namespace weft
