// weft-bench's -c check, cross-examined. Its reference (PrepareCheck and
// FillReduced) must agree bit for bit with weft's in-process backend, run as
// N ranks on N threads, for every collective, type, op, world size and
// placement; and it must count wrong and unwritten elements. Either side
// being wrong fails here, so a benchmark reporting "0 wrong" means something.
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/check.h"
#include "bench/collectives.h"
#include "bench/types.h"
#include "gtest/gtest.h"
#include "weft/weft.h"

namespace weft_bench {
namespace {

std::vector<weftDataType_t> AllTypes() { return ParseTypes("all").value(); }
std::vector<weftRedOp_t> AllOps() { return ParseOps("all").value(); }

struct Case {
  Collective c;
  weftDataType_t t;
  weftRedOp_t op;
  int nranks;
  bool in_place;
  size_t elements;  // table size / element size
  int root;
};

std::string Describe(const Case& k) {
  return std::string(CollectiveName(k.c)) + " " + TypeName(k.t) + " " + OpName(k.op) + " n=" +
         std::to_string(k.nranks) + (k.in_place ? " in-place" : " out-of-place") + " elements=" +
         std::to_string(k.elements) + " root=" + std::to_string(k.root);
}

// Runs one checked call on every rank; returns the wrong elements over all ranks.
size_t RunInProcess(const Case& k, uint64_t seed) {
  std::vector<weftComm_t> comms(static_cast<size_t>(k.nranks));
  EXPECT_EQ(weftCommInitInProcess(comms.data(), k.nranks, nullptr), weftSuccess) << weftGetLastError();
  const size_t es = TypeSize(k.t);
  const Layout l = GetLayout(k.c, k.elements, k.nranks);
  const size_t bytes = l.bytes(es) + 1;
  const Spec spec{k.t, k.op, k.nranks, seed};
  std::vector<size_t> wrong(comms.size(), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < k.nranks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<unsigned char> send(bytes), recv(bytes), expected(bytes);
      unsigned char* got = nullptr;
      size_t count = 0;
      PrepareCheck(k.c, k.in_place, l, spec, r, k.root, {send.data(), recv.data(), expected.data()}, &got, &count);
      const void* call_send = nullptr;
      void* call_recv = nullptr;
      CallBuffers(l, k.in_place, r, es, send.data(), recv.data(), &call_send, &call_recv);
      const absl::Status s = RunWeft(k.c, call_send, call_recv, l.count, k.t, k.op, k.root,
                                     comms[static_cast<size_t>(r)], nullptr);
      EXPECT_TRUE(s.ok()) << s.message();
      wrong[static_cast<size_t>(r)] = Compare(got, expected.data(), count, es).wrong;
    });
  }
  for (std::thread& t : threads) t.join();
  for (weftComm_t c : comms) weftCommDestroy(c);
  size_t total = 0;
  for (size_t w : wrong) total += w;
  return total;
}

TEST(BenchCheck, AgreesWithInProcessBackend) {
  const std::vector<weftDataType_t> types = AllTypes();
  const std::vector<weftRedOp_t> ops = AllOps();
  uint64_t seed = 1;
  for (Collective c : kCollectives) {
    for (int n = 1; n <= 4; ++n) {
      for (weftDataType_t t : types) {
        for (weftRedOp_t op : ops) {
          if (!Reduces(c) && op != weftSum) continue;
          for (bool in_place : {false, true}) {
            if (in_place && !HasInPlace(c)) continue;
            for (size_t elements : {size_t{7}, size_t{1000}}) {
              const Case k{c, t, op, n, in_place, elements, HasRoot(c) ? n - 1 : 0};
              EXPECT_EQ(RunInProcess(k, seed++), 0u) << Describe(k);
            }
          }
        }
      }
    }
  }
}

TEST(BenchCheck, CountsEveryWrongElement) {
  std::vector<float> want(100), got(100);
  const Spec s{weftFloat32, weftSum, 4, 42};
  FillReduced(want.data(), want.size(), 0, s);
  got = want;
  EXPECT_EQ(Compare(got.data(), want.data(), got.size(), 4).wrong, 0u);
  got[17] = std::nextafter(got[17], 1e9f);  // one ulp
  got[90] = -got[90] + 1;
  const Mismatch m = Compare(got.data(), want.data(), got.size(), 4);
  EXPECT_EQ(m.wrong, 2u);
  EXPECT_EQ(m.first, 17u);
  uint32_t bits;
  std::memcpy(&bits, &want[17], 4);
  EXPECT_EQ(m.want, bits);
}

TEST(BenchCheck, UnwrittenOutputIsAllWrong) {
  // What a collective that returns without writing leaves behind.
  for (weftDataType_t t : AllTypes()) {
    const Layout l = GetLayout(Collective::kAllGather, 999, 3);
    const size_t bytes = l.bytes(TypeSize(t));
    std::vector<unsigned char> send(bytes), recv(bytes), expected(bytes);
    unsigned char* got = nullptr;
    size_t count = 0;
    PrepareCheck(Collective::kAllGather, false, l, Spec{t, weftSum, 3, 7}, 1, 0,
                 {send.data(), recv.data(), expected.data()}, &got, &count);
    EXPECT_EQ(count, 999u);
    EXPECT_EQ(Compare(got, expected.data(), count, TypeSize(t)).wrong, count) << TypeName(t);
  }
}

TEST(BenchCheck, InputsDifferByRankAndAreNotZero) {
  for (weftDataType_t t : AllTypes()) {
    for (weftRedOp_t op : AllOps()) {
      const Spec s{t, op, 4, 3};
      const size_t bytes = 256 * TypeSize(t);
      std::vector<unsigned char> a(bytes), b(bytes), zero(bytes, 0);
      FillInput(a.data(), 256, 0, 0, s);
      FillInput(b.data(), 256, 0, 1, s);
      EXPECT_NE(a, b) << TypeName(t) << " " << OpName(op);
      EXPECT_NE(a, zero) << TypeName(t) << " " << OpName(op);
    }
  }
}

}  // namespace
}  // namespace weft_bench
