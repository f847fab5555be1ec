#include "tests/common/conformance.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/direct.h"
#include "core/stream.h"

namespace weft {
namespace testing {
namespace {

using Clock = std::chrono::steady_clock;

// Appends "\n  <what>" to *err when `ok` is false.
void Expect(bool ok, const std::string& what, std::string* err) {
  if (!ok) absl::StrAppend(err, "\n  ", what);
}

// An all-reduce of (rank + 1) must give N (N + 1) / 2 everywhere.
std::string CheckUsable(Communicator& comm, const std::string& when) {
  const int n = comm.size();
  std::vector<int32_t> in(33, comm.rank() + 1), out(33, -1);
  const absl::Status s = comm.AllReduce(in.data(), out.data(), in.size(), DataType::kInt32, RedOp::kSum, nullptr);
  if (!s.ok()) return absl::StrCat(when, ": all-reduce failed: ", s.ToString());
  for (int32_t v : out) {
    if (v != n * (n + 1) / 2) return absl::StrCat(when, ": all-reduce gave ", v, ", expected ", n * (n + 1) / 2);
  }
  return "";
}

std::string Finish(const std::string& what, int rank, const std::string& err) {
  return err.empty() ? "" : absl::StrCat(what, " on rank ", rank, ":", err);
}

}  // namespace

std::string CheckBadArguments(Communicator& comm) {
  const int n = comm.size();
  std::vector<float> a(8, 1.0f), b(8, 0.0f);
  const size_t huge = std::numeric_limits<size_t>::max() / 2;
  const auto f32 = DataType::kFloat32;
  const auto sum = RedOp::kSum;
  int not_a_stream = 0;
  // All-to-allv counts: n blocks of 0 or 2 elements, all at displacement 0
  // (with two ranks or more the blocks of 2 overlap), or at an overflowing one.
  const std::vector<size_t> zeros(static_cast<size_t>(n), 0), huges(static_cast<size_t>(n), huge * 2);
  const std::vector<size_t> twos(static_cast<size_t>(n), 2);
  struct Bad {
    const char* call;
    const char* must_name;  // the message must name this argument
    std::function<absl::Status()> run;
  };
  std::vector<Bad> bad = {
      {"all_reduce(sendbuf=NULL)", "sendbuf", [&] { return comm.AllReduce(nullptr, b.data(), 8, f32, sum, nullptr); }},
      {"all_reduce(recvbuf=NULL)", "recvbuf", [&] { return comm.AllReduce(a.data(), nullptr, 8, f32, sum, nullptr); }},
      {"all_reduce(datatype=99)", "datatype",
       [&] { return comm.AllReduce(a.data(), b.data(), 8, static_cast<DataType>(99), sum, nullptr); }},
      {"all_reduce(op=-1)", "op",
       [&] { return comm.AllReduce(a.data(), b.data(), 8, f32, static_cast<RedOp>(-1), nullptr); }},
      {"all_reduce(count=SIZE_MAX/2)", "count",
       [&] { return comm.AllReduce(a.data(), b.data(), huge, f32, sum, nullptr); }},
      {"all_reduce(overlapping buffers)", "overlap",
       [&] { return comm.AllReduce(a.data(), a.data() + 1, 4, f32, sum, nullptr); }},
      {"all_reduce(stream=&int)", "stream",
       [&] { return comm.AllReduce(a.data(), b.data(), 8, f32, sum, &not_a_stream); }},
      {"reduce_scatter(recvcount=SIZE_MAX/2)", "recvcount",
       [&] { return comm.ReduceScatter(a.data(), b.data(), huge, f32, sum, nullptr); }},
      {"reduce_scatter(op=5)", "op",
       [&] { return comm.ReduceScatter(a.data(), b.data(), 1, f32, static_cast<RedOp>(5), nullptr); }},
      {"all_gather(sendcount=SIZE_MAX/2)", "sendcount",
       [&] { return comm.AllGather(a.data(), b.data(), huge, f32, nullptr); }},
      {"all_gather(sendbuf=NULL)", "sendbuf", [&] { return comm.AllGather(nullptr, b.data(), 1, f32, nullptr); }},
      {"broadcast(root=-1)", "root", [&] { return comm.Broadcast(a.data(), b.data(), 8, f32, -1, nullptr); }},
      {"broadcast(root=size)", "root", [&] { return comm.Broadcast(a.data(), b.data(), 8, f32, n, nullptr); }},
      {"broadcast(datatype=-3)", "datatype",
       [&] { return comm.Broadcast(a.data(), b.data(), 8, static_cast<DataType>(-3), 0, nullptr); }},
      {"split(color=-5)", "color", [&] { return comm.Split(-5, 0).status(); }},
      {"send(peer=-1)", "peer = -1", [&] { return comm.Send(a.data(), 8, f32, -1, nullptr); }},
      {"send(peer=size)", "peer", [&] { return comm.Send(a.data(), 8, f32, n, nullptr); }},
      {"send(sendbuf=NULL)", "sendbuf", [&] { return comm.Send(nullptr, 8, f32, 0, nullptr); }},
      {"send(stream=&int)", "stream", [&] { return comm.Send(a.data(), 8, f32, 0, &not_a_stream); }},
      {"recv(recvbuf=NULL)", "recvbuf", [&] { return comm.Recv(nullptr, 8, f32, 0, nullptr); }},
      {"recv(datatype=9)", "datatype", [&] { return comm.Recv(b.data(), 8, static_cast<DataType>(9), 0, nullptr); }},
      {"recv(count=SIZE_MAX/2)", "count", [&] { return comm.Recv(b.data(), huge, f32, 0, nullptr); }},
      {"reduce(root=size)", "root", [&] { return comm.Reduce(a.data(), b.data(), 8, f32, sum, n, nullptr); }},
      {"reduce(op=7)", "op", [&] { return comm.Reduce(a.data(), b.data(), 8, f32, static_cast<RedOp>(7), 0, nullptr); }},
      {"reduce(sendbuf=NULL)", "sendbuf", [&] { return comm.Reduce(nullptr, b.data(), 8, f32, sum, 0, nullptr); }},
      {"gather(root=-2)", "root", [&] { return comm.Gather(a.data(), b.data(), 1, f32, -2, nullptr); }},
      {"gather(sendcount=SIZE_MAX/2)", "sendcount",
       [&] { return comm.Gather(a.data(), b.data(), huge, f32, 0, nullptr); }},
      {"scatter(recvbuf=NULL)", "recvbuf", [&] { return comm.Scatter(a.data(), nullptr, 1, f32, 0, nullptr); }},
      {"scatter(root=size)", "root", [&] { return comm.Scatter(a.data(), b.data(), 1, f32, n, nullptr); }},
      {"all_to_all(overlapping buffers)", "overlap",
       [&] { return comm.AllToAll(a.data(), a.data(), 1, f32, nullptr); }},
      {"all_to_all(count=SIZE_MAX/2)", "count", [&] { return comm.AllToAll(a.data(), b.data(), huge, f32, nullptr); }},
      {"all_to_allv(sendcounts=NULL)", "sendcounts is NULL",
       [&] { return comm.AllToAllv(a.data(), nullptr, zeros.data(), b.data(), zeros.data(), zeros.data(), f32,
                                   nullptr); }},
      {"all_to_allv(rdispls=NULL)", "rdispls is NULL",
       [&] { return comm.AllToAllv(a.data(), zeros.data(), zeros.data(), b.data(), zeros.data(), nullptr, f32,
                                   nullptr); }},
      {"all_to_allv(sdispls overflow)", "overflows",
       [&] { return comm.AllToAllv(a.data(), twos.data(), huges.data(), b.data(), zeros.data(), zeros.data(), f32,
                                   nullptr); }},
  };
  if (n > 1) {  // one rank has one block, which overlaps nothing
    bad.push_back({"all_to_allv(overlapping blocks)", "overlaps block", [&] {
      return comm.AllToAllv(a.data(), twos.data(), zeros.data(), b.data(), zeros.data(), zeros.data(), f32, nullptr);
    }});
  }
  std::string err;
  for (const Bad& c : bad) {
    const absl::Status s = c.run();
    if (!absl::IsInvalidArgument(s)) {
      absl::StrAppend(&err, "\n  ", c.call, " returned ", s.ToString(), ", expected INVALID_ARGUMENT");
    } else if (!absl::StrContains(s.message(), c.must_name)) {
      absl::StrAppend(&err, "\n  ", c.call, ": message \"", s.message(), "\" does not name ", c.must_name);
    }
  }
  const std::string usable = CheckUsable(comm, "after the refused calls");
  Expect(usable.empty(), usable, &err);
  return Finish("bad arguments", comm.rank(), err);
}

std::string CheckSplit(Communicator& comm, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  std::string err;
  // By parity, keys reversed: the new ranks run from the highest old rank down.
  {
    auto sub = comm.Split(r % 2, -r);
    if (!sub.ok() || *sub == nullptr) return Finish("split by parity", r, "\n  " + sub.status().ToString());
    int size = 0, above = 0;
    int64_t members = 0;
    for (int q = r % 2; q < n; q += 2) {
      ++size;
      above += q > r;
      members += q;
    }
    Expect((*sub)->size() == size, absl::StrCat("parity split size ", (*sub)->size(), ", expected ", size), &err);
    Expect((*sub)->rank() == above, absl::StrCat("parity split rank ", (*sub)->rank(), ", expected ", above), &err);
    // The sum of the members' old ranks (plus a seeded offset, so it is not a constant).
    const auto off = static_cast<int64_t>(seed % 1000);
    int64_t in = r + off, out = -1;
    const absl::Status s = (*sub)->AllReduce(&in, &out, 1, DataType::kInt64, RedOp::kSum, nullptr);
    const int64_t want = members + size * off;
    Expect(s.ok() && out == want,
           absl::StrCat("parity split all-reduce: ", s.ToString(), " ", out, ", expected ", want), &err);
  }
  // One color, equal keys: old order kept.
  {
    auto sub = comm.Split(5, 7);
    if (!sub.ok() || *sub == nullptr) return Finish("split, one color", r, "\n  " + sub.status().ToString());
    Expect((*sub)->size() == n && (*sub)->rank() == r,
           absl::StrCat("one-color split gave rank ", (*sub)->rank(), " of ", (*sub)->size()), &err);
    const std::string usable = CheckUsable(**sub, "one-color split");
    Expect(usable.empty(), usable, &err);
  }
  // Rank 0 opts out.
  {
    auto sub = comm.Split(r == 0 ? -1 : 3, 0);
    if (!sub.ok()) return Finish("split, NOCOLOR", r, "\n  " + sub.status().ToString());
    if (r == 0) {
      Expect(*sub == nullptr, "WEFT_SPLIT_NOCOLOR gave a communicator", &err);
    } else if (*sub == nullptr) {
      Expect(false, "a colored rank got no communicator", &err);
    } else {
      Expect((*sub)->size() == n - 1 && (*sub)->rank() == r - 1,
             absl::StrCat("split without rank 0 gave rank ", (*sub)->rank(), " of ", (*sub)->size()), &err);
      const std::string usable = CheckUsable(**sub, "split without rank 0");
      Expect(usable.empty(), usable, &err);
    }
  }
  return Finish("split", r, err);
}

std::string CheckHostStreams(Communicator& comm, uint64_t seed) {
  const int n = comm.size(), r = comm.rank();
  const auto k = static_cast<float>(seed % 5 + 1);
  // Different counts and types per call, so a pairing of different calls
  // across ranks (order lost) cannot pass.
  std::vector<float> ar_in(1000), ar_out(1000, -1.0f);
  for (size_t i = 0; i < ar_in.size(); ++i) ar_in[i] = static_cast<float>((r + 1) * (i % 7 + 1)) * k;
  std::vector<int32_t> ag_in(5), ag_out(5 * static_cast<size_t>(n), -1);
  for (int i = 0; i < 5; ++i) ag_in[static_cast<size_t>(i)] = r * 10 + i;
  std::vector<double> bc(300, -1.0);
  const int root = n - 1;
  if (r == root) {
    for (size_t i = 0; i < bc.size(); ++i) bc[i] = root * 1000.0 + static_cast<double>(i);
  }
  std::vector<int64_t> rs_in(3 * static_cast<size_t>(n)), rs_out(3, -1);
  for (size_t j = 0; j < rs_in.size(); ++j) rs_in[j] = static_cast<int64_t>(j) + r;
  std::vector<int64_t> blocking_in(77, r), blocking_out(77, -1);

  HostStream s1, s2;
  std::string err;
  auto enqueue = [&](const char* what, const absl::Status& s) {
    Expect(s.ok(), absl::StrCat("enqueueing ", what, ": ", s.ToString()), &err);
  };
  enqueue("all_reduce",
          comm.AllReduce(ar_in.data(), ar_out.data(), ar_in.size(), DataType::kFloat32, RedOp::kSum, &s1));
  enqueue("all_gather", comm.AllGather(ag_in.data(), ag_out.data(), 5, DataType::kInt32, &s2));
  enqueue("broadcast", comm.Broadcast(bc.data(), bc.data(), bc.size(), DataType::kFloat64, root, &s1));
  enqueue("reduce_scatter", comm.ReduceScatter(rs_in.data(), rs_out.data(), 3, DataType::kInt64, RedOp::kSum, &s2));
  // Blocking: runs after the four above, on every rank.
  const absl::Status b = comm.AllReduce(blocking_in.data(), blocking_out.data(), 77, DataType::kInt64, RedOp::kSum,
                                        nullptr);
  Expect(b.ok(), "blocking all_reduce after the streams' work: " + b.ToString(), &err);
  const absl::Status e1 = s1.Synchronize(), e2 = s2.Synchronize();
  Expect(e1.ok() && e2.ok(), absl::StrCat("synchronize: ", e1.ToString(), " / ", e2.ToString()), &err);
  Expect(comm.async_error().ok(), "async_error: " + comm.async_error().ToString(), &err);

  const float tri = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < ar_out.size(); ++i) {
    if (ar_out[i] != tri * static_cast<float>(i % 7 + 1) * k) {
      Expect(false, absl::StrCat("stream all_reduce element ", i, " = ", ar_out[i]), &err);
      break;
    }
  }
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < 5; ++i) {
      const int32_t got = ag_out[static_cast<size_t>(q * 5 + i)];
      if (got != q * 10 + i) Expect(false, absl::StrCat("stream all_gather block ", q, "[", i, "] = ", got), &err);
    }
  }
  for (size_t i = 0; i < bc.size(); ++i) {
    if (bc[i] != root * 1000.0 + static_cast<double>(i)) {
      Expect(false, absl::StrCat("stream broadcast element ", i, " = ", bc[i]), &err);
      break;
    }
  }
  for (int j = 0; j < 3; ++j) {
    const int64_t want = static_cast<int64_t>(n) * (3 * r + j) + n * (n - 1) / 2;
    if (rs_out[static_cast<size_t>(j)] != want) {
      Expect(false, absl::StrCat("stream reduce_scatter [", j, "] = ", rs_out[static_cast<size_t>(j)], ", expected ",
                                 want), &err);
    }
  }
  for (int64_t v : blocking_out) {
    if (v != n * (n - 1) / 2) {
      Expect(false, absl::StrCat("blocking all_reduce = ", v), &err);
      break;
    }
  }
  return Finish("host streams", r, err);
}

std::string CheckTimeout(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  if (n == 1 || r != n - 1) return "";
  std::string err;
  float in = 1.0f, out = 0.0f;
  const auto t0 = Clock::now();
  const absl::Status s = comm.AllReduce(&in, &out, 1, DataType::kFloat32, RedOp::kSum, nullptr);
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  Expect(absl::IsDeadlineExceeded(s),
         "a lone all_reduce returned " + s.ToString() + ", expected DEADLINE_EXCEEDED", &err);
  Expect(absl::StrContains(s.message(), absl::StrCat("rank ", r)) && absl::StrContains(s.message(), "all_reduce"),
         absl::StrCat("timeout message \"", s.message(), "\" does not name rank ", r, " and all_reduce"), &err);
  Expect(waited < comm.options().timeout_ms + 10000, absl::StrCat("the timeout took ", waited, " ms"), &err);
  const absl::Status again = comm.AllReduce(&in, &out, 1, DataType::kFloat32, RedOp::kSum, nullptr);
  Expect(!again.ok(), "a collective after a timeout succeeded alone", &err);
  return Finish("timeout", r, err);
}

std::string CheckAbort(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  if (n == 1 || r != n - 1) return "";
  std::string err;
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    comm.Abort();
  });
  float in = 1.0f, out = 0.0f;
  const auto t0 = Clock::now();
  const absl::Status s = comm.AllReduce(&in, &out, 1, DataType::kFloat32, RedOp::kSum, nullptr);
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  aborter.join();
  Expect(absl::IsAborted(s), "an all_reduce during Abort returned " + s.ToString() + ", expected ABORTED", &err);
  Expect(waited < 10000, absl::StrCat("the abort took ", waited, " ms to end the wait"), &err);
  const absl::Status again = comm.AllReduce(&in, &out, 1, DataType::kFloat32, RedOp::kSum, nullptr);
  Expect(absl::IsAborted(again), "a collective after Abort returned " + again.ToString(), &err);
  return Finish("abort", r, err);
}

std::string CheckAllReducePieces(Communicator& comm) {
  DirectReduce* const direct = FindDirectReduce(comm);
  if (direct == nullptr) {
    return absl::StrCat("backend ", Name(comm.backend()), " offers no direct-buffer reductions (comm/direct.h)");
  }
  const int n = comm.size(), r = comm.rank();
  std::vector<int32_t> one(4);
  const std::vector<Piece> probe = {{one.data(), one.data(), 0, 4}};
  if (!direct->ReducesPieces()) {
    const absl::Status s = direct->AllReducePieces(probe, DataType::kInt32, RedOp::kSum, nullptr);
    if (s.code() != absl::StatusCode::kUnimplemented || !absl::StrContains(s.message(), Name(comm.backend()))) {
      return absl::StrCat("a backend that does not reduce pieces: got ", s.ToString(), ", want Unsupported");
    }
    return "";
  }
  std::string err;
  // Offsets and counts in elements; the last piece spans many 256 KiB chunks
  // or shared-memory rounds, the middle one crosses a boundary.
  const size_t offsets[] = {3, 100, 70000}, counts[] = {90, 69000, 200000};
  for (int pass = 0; pass < 2; ++pass) {
    const bool avg = pass == 1;  // float32 average on a host stream; int32 sum blocking
    const DataType t = avg ? DataType::kFloat32 : DataType::kInt32;
    std::vector<std::vector<int32_t>> in32(3), out32(3);
    std::vector<std::vector<float>> inf(3), outf(3);
    std::vector<Piece> pieces;
    for (int i = 0; i < 3; ++i) {
      const size_t c = counts[i];
      in32[i].resize(c), out32[i].assign(c, -1), inf[i].resize(c), outf[i].assign(c, -1.0f);
      for (size_t j = 0; j < c; ++j) {
        const int v = (r + 1) * n + static_cast<int>((offsets[i] + j) % 5);  // averages exact in float32
        in32[i][j] = v, inf[i][j] = static_cast<float>(v);
      }
      void* in = avg ? static_cast<void*>(inf[i].data()) : in32[i].data();
      void* out = i == 1 ? in : avg ? static_cast<void*>(outf[i].data()) : out32[i].data();  // piece 1 in place
      pieces.push_back({in, out, offsets[i], c});
    }
    absl::Status s;
    if (avg) {
      HostStream stream;
      s = direct->AllReducePieces(pieces, t, RedOp::kAvg, &stream);
      const absl::Status done = stream.Synchronize();
      if (s.ok()) s = done;
    } else {
      s = direct->AllReducePieces(pieces, t, RedOp::kSum, nullptr);
    }
    if (!s.ok()) return absl::StrCat("all_reduce_pieces (", Name(t), "): ", s.ToString());
    for (int i = 0; i < 3; ++i) {
      for (size_t j = 0; j < counts[i]; ++j) {
        const int64_t k = static_cast<int64_t>((offsets[i] + j) % 5);
        const int64_t sum = static_cast<int64_t>(n) * n * (n + 1) / 2 + n * k;
        const double got = avg ? (i == 1 ? inf[i][j] : outf[i][j]) : (i == 1 ? in32[i][j] : out32[i][j]);
        const double want = avg ? static_cast<double>(sum) / n : static_cast<double>(sum);
        if (got != want) {
          return absl::StrCat("all_reduce_pieces (", Name(t), "): piece ", i, " element ", j, " is ", got, ", want ",
                              want);
        }
      }
    }
  }
  // Refused before anything runs.
  int32_t* p = one.data();
  const std::vector<Piece> back = {{p + 2, p + 2, 5, 2}, {p, p, 0, 2}};
  const std::vector<Piece> overlap = {{p, p + 1, 0, 2}};
  const std::vector<Piece> overflow = {{p, p, std::numeric_limits<size_t>::max() - 2, 4}};
  const std::vector<Piece> shared = {{p, p, 0, 2}, {p + 1, p + 1, 2, 2}};  // one element in both
  const std::pair<const std::vector<Piece>*, const char*> bad[] = {
      {&back, "piece 1 starts at element 0, inside the piece before it"},
      {&overlap, "piece 0: send = "},
      {&overflow, "overflows"},
      {&shared, "piece 0 and piece 1 overlap in memory"}};
  for (const auto& [list, want] : bad) {
    const absl::Status s = direct->AllReducePieces(*list, DataType::kInt32, RedOp::kSum, nullptr);
    Expect(s.code() == absl::StatusCode::kInvalidArgument && absl::StrContains(s.message(), want),
           absl::StrCat("got ", s.ToString(), ", want InvalidArgument with \"", want, "\""), &err);
  }
  if (!err.empty()) return err;
  return CheckUsable(comm, "after refused pieces");
}

std::string CheckAllReduceReady(Communicator& comm) {
  DirectReduce* const direct = FindDirectReduce(comm);
  if (direct == nullptr) {
    return absl::StrCat("backend ", Name(comm.backend()), " offers no direct-buffer reductions (comm/direct.h)");
  }
  const int n = comm.size(), r = comm.rank();
  std::string err;
  const size_t count = 300000;  // many 256 KiB chunks or shared-memory rounds
  // Element j of rank r: (r + 1) n + j % 5, whose sum over ranks and average are exact.
  const auto value = [&](int rank, size_t j) { return (rank + 1) * n + static_cast<int>(j % 5); };
  const auto sum = [&](size_t j) { return n * n * (n + 1) / 2 + n * static_cast<int>(j % 5); };
  const auto run = [&](const std::shared_ptr<ReadyBuffer>& b, std::initializer_list<size_t> uptos, RedOp op,
                       bool on_stream) -> absl::Status {
    HostStream stream;
    absl::Status s;
    for (size_t upto : uptos) {
      if (s.ok()) s = direct->AllReduceReady(b, upto, op, on_stream ? &stream : nullptr);
    }
    const absl::Status done = stream.Synchronize();
    return s.ok() ? done : s;
  };

  // 1. Everything ready before the calls: the first reduces it all.
  for (int pass = 0; pass < 2; ++pass) {
    const bool avg = pass == 0;
    std::vector<float> f(count);
    std::vector<int32_t> i32(count);
    for (size_t j = 0; j < count; ++j) f[j] = static_cast<float>(value(r, j)), i32[j] = value(r, j);
    auto b = avg ? std::make_shared<ReadyBuffer>(f.data(), count, DataType::kFloat32)
                 : std::make_shared<ReadyBuffer>(i32.data(), count, DataType::kInt32);
    b->SetReady(count);
    const absl::Status s = run(b, {1000, 70001, count}, avg ? RedOp::kAvg : RedOp::kSum, avg);
    if (!s.ok()) return absl::StrCat("all_reduce_ready, everything ready: ", s.ToString());
    Expect(b->reduced() == count && b->calls() == 3 && b->merged() == 2,
           absl::StrCat("everything ready: reduced ", b->reduced(), " in ", b->calls(), " calls with ", b->merged(),
                        " merged; want ", count, ", 3 and 2"), &err);
    for (size_t j = 0; j < count; ++j) {
      const double got = avg ? f[j] : i32[j];
      const double want = avg ? static_cast<double>(sum(j)) / n : sum(j);
      if (got != want) {
        return absl::StrCat("all_reduce_ready (", avg ? "float32 avg" : "int32 sum", "): element ", j, " is ", got,
                            ", want ", want);
      }
    }
  }

  // 2. Rank q has [0, 1000 (q + 1) + 7) ready: a call that must reach 1000
  // reduces exactly [0, 1007) (rank 0's extent) and nothing beyond.
  {
    std::vector<int32_t> x(count);
    for (size_t j = 0; j < count; ++j) x[j] = value(r, j);
    auto b = std::make_shared<ReadyBuffer>(x.data(), count, DataType::kInt32);
    b->SetReady(1000 * static_cast<size_t>(r + 1) + 7);
    absl::Status s = run(b, {1000}, RedOp::kSum, false);
    if (!s.ok()) return absl::StrCat("all_reduce_ready, ragged extents: ", s.ToString());
    const size_t want = 1007;  // rank 0's extent is the least
    Expect(b->reduced() == want, absl::StrCat("ragged extents: reduced ", b->reduced(), ", want ", want), &err);
    for (size_t j = 0; j < count && err.empty(); ++j) {
      const int expect = j < want ? sum(j) : value(r, j);
      if (x[j] != expect) {
        Expect(false, absl::StrCat("ragged extents: element ", j, " is ", x[j], ", want ", expect), &err);
      }
    }
    // The rest, once every rank has it all; a call below `reduced` merges.
    b->SetReady(count);
    s = run(b, {1000, count}, RedOp::kSum, true);
    if (!s.ok()) return absl::StrCat("all_reduce_ready, the rest: ", s.ToString());
    Expect(b->reduced() == count && b->merged() == 1,
           absl::StrCat("the rest: reduced ", b->reduced(), ", merged ", b->merged()), &err);
    for (size_t j = 0; j < count && err.empty(); ++j) {
      if (x[j] != sum(j)) Expect(false, absl::StrCat("the rest: element ", j, " is ", x[j]), &err);
    }
  }
  if (!err.empty()) return Finish("all_reduce_ready", r, err);

  // 3. A buffer in three parts (the reducer's buckets of one dtype): the
  // calls run across the parts' boundaries as over one buffer.
  {
    const size_t sizes[3] = {70001, 5, count - 70006};
    std::vector<std::vector<int32_t>> part(3);
    std::vector<Piece> parts;
    for (size_t i = 0, at = 0; i < 3; at += sizes[i], ++i) {
      part[i].resize(sizes[i]);
      for (size_t j = 0; j < sizes[i]; ++j) part[i][j] = value(r, at + j);
      parts.push_back(Piece{part[i].data(), part[i].data(), at, sizes[i]});
    }
    const auto element = [&](size_t j) { return j < 70001 ? part[0][j] : j < 70006 ? part[1][j - 70001]
                                                                                    : part[2][j - 70006]; };
    auto b = std::make_shared<ReadyBuffer>(parts, DataType::kInt32);
    // Rank q has [0, 70003 + q) ready: a call that must reach 70002 reduces
    // [0, 70003), into the second part, and nothing beyond.
    b->SetReady(70003 + static_cast<size_t>(r));
    absl::Status s = run(b, {70002}, RedOp::kSum, false);
    if (!s.ok()) return absl::StrCat("all_reduce_ready in parts, ragged extents: ", s.ToString());
    Expect(b->reduced() == 70003, absl::StrCat("in parts: reduced ", b->reduced(), ", want 70003"), &err);
    for (size_t j = 0; j < count && err.empty(); ++j) {
      const int expect = j < 70003 ? sum(j) : value(r, j);
      if (element(j) != expect) {
        Expect(false, absl::StrCat("in parts, ragged: element ", j, " is ", element(j), ", want ", expect), &err);
      }
    }
    b->SetReady(count);
    s = run(b, {70002, 70006, count}, RedOp::kSum, true);
    if (!s.ok()) return absl::StrCat("all_reduce_ready in parts, the rest: ", s.ToString());
    Expect(b->reduced() == count && b->calls() == 4 && b->merged() == 2,
           absl::StrCat("in parts, the rest: reduced ", b->reduced(), " in ", b->calls(), " calls, ", b->merged(),
                        " merged; want ", count, ", 4, 2"), &err);
    for (size_t j = 0; j < count && err.empty(); ++j) {
      if (element(j) != sum(j)) Expect(false, absl::StrCat("in parts: element ", j, " is ", element(j)), &err);
    }
  }
  if (!err.empty()) return Finish("all_reduce_ready", r, err);

  // 4. Refusals and failures that leave the communicator usable.
  std::vector<int32_t> y(64, 1);
  auto b = std::make_shared<ReadyBuffer>(y.data(), y.size(), DataType::kInt32);
  b->SetReady(64);
  absl::Status s = direct->AllReduceReady(nullptr, 1, RedOp::kSum, nullptr);
  Expect(absl::IsInvalidArgument(s) && absl::StrContains(s.message(), "buf is NULL"),
         "a NULL buffer: " + s.ToString(), &err);
  s = direct->AllReduceReady(b, 65, RedOp::kSum, nullptr);
  Expect(absl::IsInvalidArgument(s) && absl::StrContains(s.message(), "upto = 65"), "upto beyond: " + s.ToString(),
         &err);
  if (n > 1) {
    // The last rank must reach 20, the others 10: every rank is told.
    s = direct->AllReduceReady(b, r == n - 1 ? 20 : 10, RedOp::kSum, nullptr);
    Expect(absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), "all_reduce_ready") &&
               absl::StrContains(s.message(), "20"),
           "different upto: " + s.ToString(), &err);
    Expect(b->reduced() == 0, absl::StrCat("different upto: reduced ", b->reduced()), &err);
    // Rank 0 has nothing ready for a call that must reach 10: it fails, the
    // others finish with it.
    auto c = std::make_shared<ReadyBuffer>(y.data(), y.size(), DataType::kInt32);
    if (r != 0) c->SetReady(64);
    s = direct->AllReduceReady(c, 10, RedOp::kSum, nullptr);
    Expect(r == 0 ? absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), "had [0, 0)") : s.ok(),
           "a rank short of upto: " + s.ToString(), &err);
    Expect(c->reduced() == 10, absl::StrCat("a rank short of upto: reduced ", c->reduced()), &err);
    // Parts that differ between ranks (16 + 48 against 32 + 32): every rank is told, nothing is reduced.
    const size_t first = r == n - 1 ? 32 : 16;
    auto d = std::make_shared<ReadyBuffer>(
        std::vector<Piece>{{y.data(), y.data(), 0, first}, {y.data() + first, y.data() + first, first, 64 - first}},
        DataType::kInt32);
    d->SetReady(64);
    s = direct->AllReduceReady(d, 64, RedOp::kSum, nullptr);
    Expect(absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), "all_reduce_ready"),
           "parts that differ: " + s.ToString(), &err);
    Expect(d->reduced() == 0, absl::StrCat("parts that differ: reduced ", d->reduced()), &err);
  }
  // Parts must lie back to back, in place.
  auto e = std::make_shared<ReadyBuffer>(
      std::vector<Piece>{{y.data(), y.data(), 0, 8}, {y.data() + 9, y.data() + 9, 9, 8}}, DataType::kInt32);
  s = direct->AllReduceReady(e, 8, RedOp::kSum, nullptr);
  Expect(absl::IsInvalidArgument(s) && absl::StrContains(s.message(), "part 1"), "a gap between parts: " +
         s.ToString(), &err);
  if (!err.empty()) return Finish("all_reduce_ready", r, err);
  return CheckUsable(comm, "after all_reduce_ready's refusals");
}

}  // namespace testing
}  // namespace weft
