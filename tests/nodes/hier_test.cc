// The hierarchical collectives (comm/p2p/hierarchy.h) on namespaced nodes
// (cluster.py starts one process per rank; any placement): every
// collective, dtype, op and count, in place and not, on a communicator
// forced hierarchical, on one forced hierarchical with all_reduce cut into
// small pieces (pipelined), and on one forced flat, all split from the
// launched world; they agree bit for bit with each other and with the expected
// values (inputs are small integers, exact in every order of reduction),
// and results of inexact inputs are the same bits on every rank.
// WEFT_TEST_EXPECT_HIER says whether the launched world itself (WEFT_HIER
// as the test sets it) must have found a hierarchy.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <chrono>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm/p2p/comm.h"
#include "comm/registry.h"
#include "core/reduce.h"
#include "gtest/gtest.h"

namespace weft {
namespace testing {
namespace {

int Np() { return std::atoi(std::getenv("WEFT_TEST_NP") ? std::getenv("WEFT_TEST_NP") : "1"); }

// The launched world, and two communicators split from it with WEFT_HIER
// forced each way (the table is read when a communicator is made).
struct Worlds {
  std::unique_ptr<Communicator> world, flat, hier, piped;
};

// Pieces this small cut the tests' larger counts into many (up to
// kMaxHierPieces), so every pipeline stage overlaps another.
constexpr const char* kPiped = "on,piece=4K";

Worlds& Get() {
  static Worlds* w = [] {
    auto* w = new Worlds;
    absl::StatusOr<std::unique_ptr<Communicator>> made = InitWorld(Backend::kAuto, {});
    EXPECT_TRUE(made.ok()) << made.status();
    if (!made.ok()) return w;
    w->world = std::move(*made);
    const int r = w->world->rank();
    const char* before = std::getenv("WEFT_HIER");
    const std::string saved = before != nullptr ? before : "";
    setenv("WEFT_HIER", "off", 1);
    absl::StatusOr<std::unique_ptr<Communicator>> flat = w->world->Split(0, r);
    setenv("WEFT_HIER", "on", 1);
    absl::StatusOr<std::unique_ptr<Communicator>> hier = w->world->Split(0, r);
    setenv("WEFT_HIER", kPiped, 1);
    absl::StatusOr<std::unique_ptr<Communicator>> piped = w->world->Split(0, r);
    if (before != nullptr) setenv("WEFT_HIER", saved.c_str(), 1); else unsetenv("WEFT_HIER");
    EXPECT_TRUE(flat.ok()) << flat.status();
    EXPECT_TRUE(hier.ok()) << hier.status();
    EXPECT_TRUE(piped.ok()) << piped.status();
    if (flat.ok()) w->flat = std::move(*flat);
    if (hier.ok()) w->hier = std::move(*hier);
    if (piped.ok()) w->piped = std::move(*piped);
    return w;
  }();
  return *w;
}

const p2p::P2pComm* AsP2p(const Communicator& c) { return dynamic_cast<const p2p::P2pComm*>(&c); }

// Rank q's element i: a small integer, so any order of reduction is exact
// (prod: 1 or 2, so 2^ranks stays exact and in range of every type).
double Value(int q, size_t i, RedOp op) {
  if (op == RedOp::kProd) return static_cast<double>(1 + (q + static_cast<int>(i % 7)) % 2);
  return static_cast<double>((q * 7 + static_cast<int>(i % 11) * 3) % 13);
}

template <typename T>
void Put(std::vector<unsigned char>& out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}

std::vector<unsigned char> Fill(DataType t, int q, size_t n, RedOp op) {
  std::vector<unsigned char> out(n * ElementSize(t));
  for (size_t i = 0; i < n; ++i) {
    const double v = Value(q, i, op);
    switch (t) {
      case DataType::kFloat32: Put(out, i, static_cast<float>(v)); break;
      case DataType::kFloat64: Put(out, i, v); break;
      case DataType::kFloat16: Put(out, i, DoubleToHalf(v)); break;
      case DataType::kBfloat16: Put(out, i, DoubleToBf16(v)); break;
      case DataType::kInt8: Put(out, i, static_cast<int8_t>(v)); break;
      case DataType::kUint8: Put(out, i, static_cast<uint8_t>(v)); break;
      case DataType::kInt16: Put(out, i, static_cast<int16_t>(v)); break;
      case DataType::kInt32: Put(out, i, static_cast<int32_t>(v)); break;
      case DataType::kInt64: Put(out, i, static_cast<int64_t>(v)); break;
    }
  }
  return out;
}

// The reduction of every rank's input, in rank order (exact here).
std::vector<unsigned char> Expected(DataType t, RedOp op, int np, size_t n) {
  std::vector<std::vector<unsigned char>> in;
  for (int q = 0; q < np; ++q) in.push_back(Fill(t, q, n, op));
  std::vector<unsigned char> out(n * ElementSize(t)), acc(n * AccumSize(t));
  ReduceInRankOrder(t, op, np, [&](int q) { return in[static_cast<size_t>(q)].data(); }, n, acc.data(), out.data());
  return out;
}

struct Case {
  DataType t;
  RedOp op;
};
const Case kCases[] = {{DataType::kFloat32, RedOp::kSum}, {DataType::kFloat32, RedOp::kAvg},
                       {DataType::kFloat64, RedOp::kMax}, {DataType::kBfloat16, RedOp::kSum},
                       {DataType::kFloat16, RedOp::kAvg}, {DataType::kInt32, RedOp::kProd},
                       {DataType::kInt32, RedOp::kAvg},   {DataType::kInt8, RedOp::kMin},
                       {DataType::kInt16, RedOp::kSum}};
// One element, counts the node's ranks do not divide, and one large enough
// for the default table's hierarchy too.
const size_t kCounts[] = {1, 3, 1001, (size_t{256} << 10) / 4 + 5};

class Hier : public ::testing::Test {
 protected:
  void SetUp() override {
    Worlds& w = Get();
    ASSERT_NE(w.flat, nullptr);
    ASSERT_NE(w.hier, nullptr);
    ASSERT_NE(w.piped, nullptr);
    ASSERT_EQ(w.world->size(), Np());
  }
};

TEST_F(Hier, TheLaunchedWorldFindsItsNodes) {
  Worlds& w = Get();
  const p2p::P2pComm* world = AsP2p(*w.world);
  ASSERT_NE(world, nullptr);
  const char* nodes = std::getenv("WEFT_TEST_NODES");
  ASSERT_NE(nodes, nullptr) << "run under tests/nodes/cluster.py";
  EXPECT_EQ(world->topology().nodes(), std::atoi(nodes));
  const char* expect = std::getenv("WEFT_TEST_EXPECT_HIER");
  if (expect != nullptr) {
    EXPECT_EQ(world->hierarchy() != nullptr, std::atoi(expect) != 0);
  }
  EXPECT_EQ(AsP2p(*w.flat)->hierarchy(), nullptr);
  EXPECT_NE(AsP2p(*w.hier)->hierarchy(), nullptr);
  EXPECT_NE(AsP2p(*w.piped)->hierarchy(), nullptr);
}

TEST_F(Hier, AllReduceMatchesFlatAndExpected) {
  Worlds& w = Get();
  const int me = w.world->rank(), np = w.world->size();
  for (const Case& c : kCases) {
    for (size_t n : kCounts) {
      const std::vector<unsigned char> in = Fill(c.t, me, n, c.op), want = Expected(c.t, c.op, np, n);
      for (bool in_place : {false, true}) {
        std::vector<unsigned char> flat = in, hier = in, piped = in;
        std::vector<unsigned char> out_f(in.size()), out_h(in.size()), out_p(in.size(), 0xee);
        void* rf = in_place ? flat.data() : out_f.data();
        void* rh = in_place ? hier.data() : out_h.data();
        void* rp = in_place ? piped.data() : out_p.data();
        ASSERT_TRUE(w.flat->AllReduce(flat.data(), rf, n, c.t, c.op, nullptr).ok());
        ASSERT_TRUE(w.hier->AllReduce(hier.data(), rh, n, c.t, c.op, nullptr).ok());
        ASSERT_TRUE(w.piped->AllReduce(piped.data(), rp, n, c.t, c.op, nullptr).ok());
        const std::string what = std::string(Name(c.t)) + " " + Name(c.op) + " n=" + std::to_string(n) +
                                 (in_place ? " in place" : "");
        EXPECT_EQ(std::memcmp(rf, want.data(), want.size()), 0) << "flat " << what;
        EXPECT_EQ(std::memcmp(rh, want.data(), want.size()), 0) << "hierarchical " << what;
        EXPECT_EQ(std::memcmp(rp, want.data(), want.size()), 0) << "hierarchical in pieces " << what;
      }
    }
  }
}

TEST_F(Hier, ReduceScatterMatchesFlatAndExpected) {
  Worlds& w = Get();
  const int me = w.world->rank(), np = w.world->size();
  for (const Case& c : kCases) {
    for (size_t n : {size_t{1}, size_t{777}, size_t{70000}}) {
      const size_t es = ElementSize(c.t);
      const std::vector<unsigned char> in = Fill(c.t, me, n * static_cast<size_t>(np), c.op);
      const std::vector<unsigned char> want = Expected(c.t, c.op, np, n * static_cast<size_t>(np));
      std::vector<unsigned char> out_f(n * es), out_h(n * es);
      ASSERT_TRUE(w.flat->ReduceScatter(in.data(), out_f.data(), n, c.t, c.op, nullptr).ok());
      ASSERT_TRUE(w.hier->ReduceScatter(in.data(), out_h.data(), n, c.t, c.op, nullptr).ok());
      const unsigned char* mine = want.data() + static_cast<size_t>(me) * n * es;
      EXPECT_EQ(std::memcmp(out_f.data(), mine, n * es), 0) << "flat " << Name(c.t) << " " << Name(c.op) << " " << n;
      EXPECT_EQ(std::memcmp(out_h.data(), mine, n * es), 0) << "hier " << Name(c.t) << " " << Name(c.op) << " " << n;
    }
  }
}

TEST_F(Hier, AllGatherAndBroadcastFromEveryRoot) {
  Worlds& w = Get();
  const int me = w.world->rank(), np = w.world->size();
  for (size_t n : {size_t{1}, size_t{999}, size_t{100000}}) {
    const std::vector<unsigned char> in = Fill(DataType::kInt32, me, n, RedOp::kSum);
    std::vector<unsigned char> want;
    for (int q = 0; q < np; ++q) {
      const std::vector<unsigned char> b = Fill(DataType::kInt32, q, n, RedOp::kSum);
      want.insert(want.end(), b.begin(), b.end());
    }
    std::vector<unsigned char> out_f(want.size()), out_h(want.size());
    ASSERT_TRUE(w.flat->AllGather(in.data(), out_f.data(), n, DataType::kInt32, nullptr).ok());
    ASSERT_TRUE(w.hier->AllGather(in.data(), out_h.data(), n, DataType::kInt32, nullptr).ok());
    EXPECT_EQ(out_f, want) << "flat all_gather " << n;
    EXPECT_EQ(out_h, want) << "hierarchical all_gather " << n;
    for (int root = 0; root < np; ++root) {
      const std::vector<unsigned char> sent = Fill(DataType::kInt32, root, n, RedOp::kSum);
      std::vector<unsigned char> b(sent.size(), 0xee);
      ASSERT_TRUE(w.hier->Broadcast(in.data(), b.data(), n, DataType::kInt32, root, nullptr).ok());
      EXPECT_EQ(b, sent) << "hierarchical broadcast from " << root << ", " << n;
    }
  }
}

// Inexact inputs: the order of reduction shows in the bits, and every rank
// must still end with the same ones.
TEST_F(Hier, InexactSumsAreTheSameBitsOnEveryRank) {
  Worlds& w = Get();
  const int me = w.world->rank(), np = w.world->size();
  const size_t n = 300001;
  std::mt19937 gen(static_cast<unsigned>(me) * 7919u + 1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = u(gen) * 1e3f;
  for (Communicator* c : {w.hier.get(), w.piped.get()}) {
    std::vector<float> y(n);
    ASSERT_TRUE(c->AllReduce(x.data(), y.data(), n, DataType::kFloat32, RedOp::kSum, nullptr).ok());
    std::vector<float> all(n * static_cast<size_t>(np));
    ASSERT_TRUE(w.flat->AllGather(y.data(), all.data(), n, DataType::kFloat32, nullptr).ok());
    for (int q = 0; q < np; ++q) {
      EXPECT_EQ(std::memcmp(all.data() + static_cast<size_t>(q) * n, y.data(), n * sizeof(float)), 0)
          << "rank " << q << "'s result differs from rank " << me << "'s" << (c == w.piped.get() ? " (pieces)" : "");
    }
  }
}

TEST_F(Hier, ABadTableIsAnErrorNamingTheVariable) {
  Worlds& w = Get();
  setenv("WEFT_HIER", "all_reduce=12Q", 1);
  absl::StatusOr<std::unique_ptr<Communicator>> bad = w.world->Split(0, w.world->rank());
  unsetenv("WEFT_HIER");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("WEFT_HIER=\"all_reduce=12Q\""), std::string::npos) << bad.status();
  // The world is still in step: a collective after the failed split works.
  int v = 1;
  ASSERT_TRUE(w.world->AllReduce(&v, &v, 1, DataType::kInt32, RedOp::kSum, nullptr).ok());
  EXPECT_EQ(v, w.world->size());
}

// Errors raised inside a step name world ranks, not the node's or the
// inter-node communicator's own. Run alone (nodes_hier_2x2_errors) with
// WEFT_CHECK_CALLS=0, so that the world's call check does not catch the
// missing rank before the steps do, and a short WEFT_TIMEOUT_MS: the last
// rank sits out one all_reduce; its node's ranks fail in the node step
// waiting for it, the other node's in the inter-node step waiting for theirs.
std::set<int> RanksNamed(const std::string& m) {
  std::set<int> out;
  static const std::regex list(R"((?:^|[^A-Za-z_])[Rr]anks?(?:\(s\))?:? *\{?((?:\d+(?:, *)?)+))");
  for (std::sregex_iterator it(m.begin(), m.end(), list), end; it != end; ++it) {
    const std::string numbers = (*it)[1];
    static const std::regex number(R"(\d+)");
    for (std::sregex_iterator n(numbers.begin(), numbers.end(), number); n != end; ++n) out.insert(std::stoi(n->str()));
  }
  return out;
}

TEST(HierErrors, AStepsErrorNamesWorldRanks) {
  if (std::getenv("WEFT_TEST_HIER_ERRORS") == nullptr) {
    GTEST_SKIP() << "run by nodes_hier_2x2_errors (WEFT_TEST_HIER_ERRORS=1, WEFT_CHECK_CALLS=0)";
  }
  absl::StatusOr<std::unique_ptr<Communicator>> made = InitWorld(Backend::kAuto, {});
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<Communicator> world = std::move(*made);
  const p2p::P2pComm* p2p = AsP2p(*world);
  ASSERT_NE(p2p, nullptr);
  ASSERT_NE(p2p->hierarchy(), nullptr) << "the launched world must be hierarchical";
  const p2p::Topology& topo = p2p->topology();
  const int me = world->rank(), silent = world->size() - 1;
  const int my_node = topo.node_of[static_cast<size_t>(me)], silent_node = topo.node_of[static_cast<size_t>(silent)];
  // 1 MiB: hierarchical under the default table, and in pieces under the
  // test's WEFT_HIER (piece=256K), so the pipelined path's errors show too.
  const size_t n = size_t{1} << 18;
  std::vector<float> x(n, 1.0f);
  if (me == silent) {
    // Alive, but never calls: every other rank must time out and name it or
    // the rank it waited on, by world rank.
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * world->options().timeout_ms + 1000));
    world->Abort();
    return;
  }
  const absl::Status s = world->AllReduce(x.data(), x.data(), n, DataType::kFloat32, RedOp::kSum, nullptr);
  world->Abort();
  ASSERT_FALSE(s.ok());
  const std::string m(s.message());
  std::fprintf(stderr, "rank %d's error: %s\n", me, m.c_str());  // the log shows what a user would read
  std::set<int> allowed, must;
  std::string where;
  if (my_node == silent_node) {
    // Within the node: its ranks, and the silent one among them.
    const std::vector<int>& mates = topo.ranks_of[static_cast<size_t>(my_node)];
    allowed.insert(mates.begin(), mates.end());
    must = {silent};
    where = "within node " + std::to_string(my_node);
  } else {
    // Across the nodes: this rank and its peer on the silent rank's node.
    const int peer = topo.RankAt(silent_node, topo.local_of[static_cast<size_t>(me)]);
    allowed = {me, peer};
    must = {peer};
    where = std::to_string(peer) + " (node " + std::to_string(silent_node) + ")";
  }
  EXPECT_NE(m.find(where), std::string::npos) << m;
  const std::set<int> named = RanksNamed(m);
  for (int r : named) EXPECT_TRUE(allowed.count(r)) << "names rank " << r << ", not one of this step's: " << m;
  for (int r : must) EXPECT_TRUE(named.count(r)) << "does not name rank " << r << ": " << m;
  EXPECT_TRUE(named.count(me)) << "does not name itself: " << m;
}

// WEFT_FAULT acts on the world's call, once, and not again in the steps
// (whose communicators have ranks of their own, which the fault must not
// take for world ranks). Run alone (nodes_hier_2x2_fault) with
// WEFT_FAULT=corrupt:1: rank 1's contribution is doubled, so every rank gets
// the sum plus rank 1's input, bit for bit (small integers).
TEST(HierFault, ACorruptRankIsDamagedOnceNotInTheSteps) {
  const char* fault = std::getenv("WEFT_FAULT");
  if (fault == nullptr || std::string(fault) != "corrupt:1") {
    GTEST_SKIP() << "run by nodes_hier_2x2_fault (WEFT_FAULT=corrupt:1)";
  }
  absl::StatusOr<std::unique_ptr<Communicator>> made = InitWorld(Backend::kAuto, {});
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<Communicator> world = std::move(*made);
  ASSERT_NE(AsP2p(*world)->hierarchy(), nullptr) << "the launched world must be hierarchical";
  const int me = world->rank(), np = world->size();
  // Several of the default table's pieces, and a tail the node does not divide.
  const size_t n = (size_t{20} << 20) / 4 + 1;
  std::vector<float> x(n), want(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(Value(me, i, RedOp::kSum));
    for (int q = 0; q < np; ++q) want[i] += static_cast<float>(Value(q, i, RedOp::kSum)) * (q == 1 ? 2.0f : 1.0f);
  }
  std::vector<float> y(n, -1.0f);
  ASSERT_TRUE(world->AllReduce(x.data(), y.data(), n, DataType::kFloat32, RedOp::kSum, nullptr).ok());
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += y[i] != want[i];
  EXPECT_EQ(wrong, 0u) << "e.g. element 0: " << y[0] << ", expected " << want[0];
}

}  // namespace
}  // namespace testing
}  // namespace weft
