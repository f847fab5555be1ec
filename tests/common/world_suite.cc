// The conformance suite on a world of processes, one rank each: every
// collective and dtype, the point-to-point and shared-memory paths, split,
// host streams, the reducer, timeouts and abort. Each executable that links
// it says how its world is made (TestWorld): tests/mpi under mpiexec
// (MPI_COMM_WORLD), tests/launch under torchrun-, Slurm- and weft-style
// variables, unique ids and a store (no MPI).
#include "tests/common/world_suite.h"

#include <cstdlib>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "comm/direct.h"
#include "comm/p2p/comm.h"
#include "shard/reducer.h"
#include "gtest/gtest.h"
#include "tests/common/collective_check.h"
#include "tests/common/conformance.h"
#include "tests/common/mismatch_check.h"
#include "tests/common/p2p_check.h"
#include "tests/common/shard_check.h"
#include "tests/common/tag_check.h"

namespace weft {
namespace testing {
namespace {

constexpr uint64_t kSeed = 0x5eedbeef;
constexpr int kMaxFailures = 10;

std::unique_ptr<Communicator> World(CommOptions options = {}) { return TestWorld(options); }

void RunCases(Communicator& comm, const std::vector<Case>& cases) {
  int failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string e = CheckCase(comm, cases[i], kSeed + i);
    if (!e.empty() && ++failed <= kMaxFailures) ADD_FAILURE() << e;
  }
  EXPECT_EQ(failed, 0) << "cases failed on rank " << comm.rank();
}

// The backend takes the shared-memory path exactly when every rank of a
// communicator is on one node, unless WEFT_SHM=0 (the suite runs both ways).
// Every rank runs on one node unless WEFT_TEST_NODES=n says the launch
// spread them over n nodes in blocks (rank r on node r / (size / n), as
// tests/nodes/cluster.py does), each with its own host name: then a world
// or split spanning nodes must not get shared memory, and a split of one
// node's ranks must.
TEST(World, SharedMemoryPathFollowsWeftShm) {
  auto comm = World();
  ASSERT_NE(comm, nullptr);
  const auto* p2p_comm = dynamic_cast<const p2p::P2pComm*>(comm.get());
  ASSERT_NE(p2p_comm, nullptr);
  const char* shm = std::getenv("WEFT_SHM");
  const bool on = shm == nullptr || std::string(shm) != "0";
  const char* nodes_env = std::getenv("WEFT_TEST_NODES");
  const int nodes = nodes_env != nullptr ? std::atoi(nodes_env) : 1;
  ASSERT_TRUE(nodes >= 1 && comm->size() % nodes == 0) << "WEFT_TEST_NODES=" << nodes_env;
  const int per_node = comm->size() / nodes;
  auto node_of = [per_node](int q) { return q / per_node; };
  const std::string why = std::string("WEFT_SHM=") + (shm ? shm : "(unset)") + ", " + std::to_string(nodes) +
                          " node(s)";
  EXPECT_EQ(p2p_comm->shared_memory(), on && comm->size() > 1 && nodes == 1) << why;
  auto half = comm->Split(comm->rank() % 2, 0);  // splits decide again, over their own ranks
  ASSERT_TRUE(half.ok()) << half.status();
  bool half_on_one_node = true;
  for (int q = comm->rank() % 2; q < comm->size(); q += 2) half_on_one_node &= node_of(q) == node_of(comm->rank());
  EXPECT_EQ(dynamic_cast<const p2p::P2pComm&>(**half).shared_memory(),
            on && (*half)->size() > 1 && half_on_one_node) << why;
  auto node = comm->Split(node_of(comm->rank()), 0);
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_EQ((*node)->size(), per_node);
  EXPECT_EQ(dynamic_cast<const p2p::P2pComm&>(**node).shared_memory(), on && per_node > 1) << why;
}

TEST(World, CollectiveMatrix) {
  auto comm = World();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->backend(), TestBackend());
  RunCases(*comm, MatrixCases(comm->size()));
}

// A 256-byte segment sends every count above it (1000 elements of any type)
// through the pipelined ring and chain, many lanes deep, or through many
// shared-memory rounds (a few elements each at four ranks), for every
// dtype x op.
TEST(World, PipelinedPathsWithSmallSegments) {
  CommOptions options;
  options.segment_bytes = 256;
  auto comm = World(options);
  ASSERT_NE(comm, nullptr);
  RunCases(*comm, CasesAtCounts(comm->size(), {7, 1000}));
}

// Collectives of every kind back to back at random sizes, each spanning a
// few small rounds or segments, so that consecutive calls reuse the
// shared-memory staging buffers at every phase of their rotation. Every rank
// draws the same sequence from the same seed.
TEST(World, RandomSequenceThroughSmallRounds) {
  CommOptions options;
  options.segment_bytes = 512;
  auto comm = World(options);
  ASSERT_NE(comm, nullptr);
  std::mt19937_64 rng(kSeed);
  const DataType types[] = {DataType::kFloat32, DataType::kBfloat16, DataType::kFloat64, DataType::kInt8,
                            DataType::kInt16,   DataType::kInt64};
  std::vector<Case> cases;
  for (int i = 0; i < 80; ++i) {
    Case c;
    c.coll = static_cast<Coll>(rng() % 4);
    c.t = types[rng() % std::size(types)];
    c.op = static_cast<RedOp>(rng() % kNumRedOps);
    c.count = 1 + rng() % 600;
    c.in_place = rng() % 2 == 0;
    c.root = static_cast<int>(rng() % static_cast<uint64_t>(comm->size()));
    cases.push_back(c);
  }
  RunCases(*comm, cases);
}

// Runs `check` on the world with shared-memory rounds of the default size
// and of 256 bytes (many rounds per call); in the WEFT_SHM=0 run both are
// point-to-point segment sizes.
void WithRoundSizes(const std::function<std::string(Communicator&)>& check) {
  for (size_t segment : {size_t{0}, size_t{256}}) {
    CommOptions options;
    options.segment_bytes = segment;
    auto comm = World(options);
    ASSERT_NE(comm, nullptr);
    EXPECT_EQ(check(*comm), "") << "segment_bytes " << segment << ", rank " << comm->rank();
  }
}

// On one node with shared memory (the default) pieces are staged straight
// from and into their buffers (pieces within a round, and over many);
// WEFT_SHM=0 checks the refusal.
TEST(World, AllReducePieces) { WithRoundSizes(CheckAllReducePieces); }

// On one node the ranks' ready extents ride on a shared-memory barrier;
// with WEFT_SHM=0 (the point-to-point run) one small all-reduce settles
// them first.
TEST(World, AllReduceReady) { WithRoundSizes(CheckAllReduceReady); }

// The DDP reducer on MPI ranks, separate gradient buffers: on one node the
// segments of small gradients are reduced in pieces straight from and into
// the gradients (shared memory), with WEFT_SHM=0 through the bucket's
// copies. Buffers alternate between two sets, the idle set poisoned, and
// one gradient is unused everywhere in step 2 (left alone): a stale pointer
// would read poison or write into the idle set.
const std::vector<size_t> kReducerCounts = {7, 0, 1, 300, 33, 1000, 5, 64, 129, 2, 777, 16, 3000};

std::vector<shard::GradSpec> ReducerSpecs() {
  std::vector<shard::GradSpec> specs;
  for (size_t c : kReducerCounts) specs.push_back({c, DataType::kFloat32, MemKind::kHost, std::string()});
  return specs;
}

// Several buckets; segments of 256 elements, many of several gradients.
shard::ReducerOptions SmallReducerBuckets() {
  shard::ReducerOptions o;
  o.bucket_cap_bytes = 4096;
  o.first_bucket_cap_bytes = 512;
  o.segment_bytes = 1024;
  return o;
}

// Integers in [-8, 8]: their averages over 2 or 4 ranks are exact either way.
float ReducerValue(int step, int rank, size_t g, size_t j) {
  return static_cast<float>(static_cast<int>((step * 7 + rank * 5 + g * 3 + j) % 17) - 8);
}

TEST(World, ReducerAveragesSeparateBuffers) {
  auto comm = World();
  ASSERT_NE(comm, nullptr);
  const int n = comm->size(), r = comm->rank();
  const std::vector<size_t>& counts = kReducerCounts;
  shard::ReducerOptions o = SmallReducerBuckets();
  o.min_piece_bytes = 0;  // pieces even for these tiny gradients
  auto red = shard::Reducer::Create(comm.get(), ReducerSpecs(), o);
  ASSERT_TRUE(red.ok()) << red.status();
  const auto value = ReducerValue;
  auto poison = [](size_t j) { return 4096.0f + static_cast<float>(j); };
  std::vector<std::vector<float>> sets[2];
  for (auto& set : sets) {
    for (size_t c : counts) set.emplace_back(c);
  }
  for (int step = 0; step < 4; ++step) {
    auto& mine = sets[step % 2];
    auto& idle = sets[1 - step % 2];
    for (size_t g = 0; g < counts.size(); ++g) {
      for (size_t j = 0; j < counts[g]; ++j) mine[g][j] = value(step, r, g, j), idle[g][j] = poison(j);
    }
    for (int g = static_cast<int>(counts.size()) - 1; g >= 0; --g) {
      const absl::Status s =
          step == 2 && g == 3 ? (*red)->MarkUnused(g) : (*red)->MarkReady(g, mine[g].data(), nullptr);
      ASSERT_TRUE(s.ok()) << s;
    }
    const absl::Status done = (*red)->Finalize(nullptr);
    ASSERT_TRUE(done.ok()) << done;
    for (size_t g = 0; g < counts.size(); ++g) {
      for (size_t j = 0; j < counts[g]; ++j) {
        ASSERT_EQ(idle[g][j], poison(j)) << "step " << step << " grad " << g << ": the idle buffer was touched";
        float want = value(step, r, g, j);  // unused: left alone
        if (!(step == 2 && g == 3)) {
          double sum = 0;
          for (int q = 0; q < n; ++q) sum += value(step, q, g, j);
          want = static_cast<float>(sum / n);
        }
        ASSERT_EQ(mine[g][j], want) << "step " << step << " grad " << g << " element " << j << " rank " << r;
      }
    }
  }
  const DirectReduce* direct = FindDirectReduce(*comm);
  ASSERT_NE(direct, nullptr);
  EXPECT_EQ((*red)->stats().segments_in_pieces > 0, direct->ReducesPieces());
  EXPECT_EQ(direct->ReducesPieces(), dynamic_cast<const p2p::P2pComm&>(*comm).shared_memory());
}

// Gradients as bucket views on MPI ranks. Marked in registration order,
// every segment is ready before the first call is enqueued; where the
// ranks agree within the call (one node: shared memory) each bucket goes in
// its first segment's call, elsewhere (WEFT_SHM=0) nothing merges. Averages
// exact either way, and the same on every step.
TEST(World, ReducerViewSegmentsMergeOnOneNode) {
  auto comm = World();
  ASSERT_NE(comm, nullptr);
  const int n = comm->size(), r = comm->rank();
  const std::vector<size_t>& counts = kReducerCounts;
  shard::ReducerOptions o = SmallReducerBuckets();
  o.gradient_as_bucket_view = true;
  o.rebuild_buckets = false;
  auto red = shard::Reducer::Create(comm.get(), ReducerSpecs(), o);
  ASSERT_TRUE(red.ok()) << red.status();
  shard::Reducer& rd = **red;
  const auto value = ReducerValue;
  for (int step = 0; step < 3; ++step) {
    const shard::ReducerStats before = rd.stats();
    std::vector<float*> view;
    for (size_t g = 0; g < counts.size(); ++g) {
      view.push_back(static_cast<float*>(*rd.GradSlot(static_cast<int>(g))));
      for (size_t j = 0; j < counts[g]; ++j) view[g][j] = value(step, r, g, j);
    }
    for (size_t g = 0; g < counts.size(); ++g) ASSERT_TRUE(rd.MarkReady(static_cast<int>(g), view[g], nullptr).ok());
    const absl::Status done = rd.Finalize(nullptr);
    ASSERT_TRUE(done.ok()) << done;
    for (size_t g = 0; g < counts.size(); ++g) {
      for (size_t j = 0; j < counts[g]; ++j) {
        double sum = 0;
        for (int q = 0; q < n; ++q) sum += value(step, q, g, j);
        ASSERT_EQ(view[g][j], static_cast<float>(sum / n)) << "step " << step << " grad " << g << " rank " << r;
      }
    }
    const shard::ReducerStats after = rd.stats();
    const int64_t segments = after.segments_launched - before.segments_launched;
    const int64_t buckets = after.buckets_launched - before.buckets_launched;
    const int64_t merged = after.segments_merged - before.segments_merged;
    EXPECT_GT(segments, buckets + 2);
    EXPECT_EQ(merged, FindDirectReduce(*comm)->AgreesReadyInCall() ? segments - buckets : 0) << "step " << step << " rank " << r;
  }
}

// Sends before receives everywhere, messages up to 4 MiB, groups, tags,
// receives from any source and uneven all-to-alls; with 256-byte segments
// (WithRoundSizes) sends are cut into many messages and the exchanges into
// many segments.
TEST(World, SendRecv) { WithRoundSizes([](Communicator& c) { return CheckSendRecv(c, kSeed); }); }
TEST(World, Groups) { WithRoundSizes([](Communicator& c) { return CheckGroups(c, kSeed); }); }
TEST(World, AllToAllv) { WithRoundSizes([](Communicator& c) { return CheckAllToAllv(c, kSeed); }); }
TEST(World, Tags) { WithRoundSizes([](Communicator& c) { return CheckTags(c, kSeed); }); }
TEST(World, AnySource) { WithRoundSizes([](Communicator& c) { return CheckAnySource(c, kSeed); }); }

// An FSDP step's shard group over processes: unshard, two micro-batches of
// gradients reduced into the fp32 shards, reshard; fp32 and bf16 compute.
TEST(World, ShardGroupStep) {
  auto comm = World();
  ASSERT_NE(comm, nullptr);
  shard::CheckShardGroupStep(*comm, {}, false);
  shard::ShardGroupOptions bf16;
  bf16.param_dtype = DataType::kBfloat16;
  shard::CheckShardGroupStep(*comm, bf16, true);
}

TEST(World, BadArgumentsAreRefusedAndLeaveTheCommunicatorUsable) {
  auto comm = World();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(CheckBadArguments(*comm), "");
}

TEST(World, Split) {
  auto comm = World();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(CheckSplit(*comm, kSeed), "");
}

TEST(World, HostStreamsKeepIssueOrder) {
  auto comm = World();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(CheckHostStreams(*comm, kSeed), "");
}

TEST(World, LoneCollectiveTimesOutAndBreaksTheCommunicator) {
  CommOptions options;
  options.timeout_ms = 500;
  auto comm = World(options);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(CheckTimeout(*comm), "");
  if (comm->rank() == comm->size() - 1 && comm->size() > 1) {
    float x = 1;
    const absl::Status s = comm->AllReduce(&x, &x, 1, DataType::kFloat32, RedOp::kSum, nullptr);
    EXPECT_NE(s.message().find("unusable"), std::string::npos) << s;
  }
}

// Ranks that pass different roots to one broadcast leave messages behind
// over point-to-point (each "root" sends, nobody receives them); the next
// collective's receives then meet messages of another size. That must be an
// error on every rank, never a message accepted into a smaller buffer or a
// shorter one taken as the data.
TEST(World, MismatchedRootsFailInsteadOfCorrupting) {
  CommOptions options;
  options.timeout_ms = 10000;
  auto comm = World(options);
  ASSERT_NE(comm, nullptr);
  if (comm->size() < 2 || dynamic_cast<const p2p::P2pComm&>(*comm).shared_memory()) {
    GTEST_SKIP() << "needs point-to-point ranks (WEFT_SHM=0, 2 or more)";
  }
  std::vector<float> big(100, static_cast<float>(comm->rank() + 1));
  const int root = comm->rank() == 1 ? 1 : 0;
  const absl::Status b = comm->Broadcast(big.data(), big.data(), big.size(), DataType::kFloat32, root, nullptr);
  std::vector<float> small(4, 1.0f);
  const absl::Status a = b.ok() ? comm->AllReduce(small.data(), small.data(), small.size(), DataType::kFloat32,
                                                  RedOp::kSum, nullptr)
                                : b;
  ASSERT_FALSE(a.ok()) << "rank " << comm->rank() << ": the broadcast and the all-reduce both succeeded";
  // The call check names the two roots before any data moves; without it
  // (WEFT_CHECK_CALLS=0) the receive that meets a message of another size
  // names both sizes. Either way not a timeout.
  EXPECT_TRUE(a.message().find("bytes") != std::string::npos || a.message().find("root") != std::string::npos) << a;
  EXPECT_FALSE(absl::IsDeadlineExceeded(a)) << "not a timeout: " << a;
}

// Every pair of calls that differ in collective, dtype, count, op or root
// fails on every rank, on the shared-memory rounds and the point-to-point
// schedules alike, and the communicator refuses later calls.
TEST(World, MismatchedCallsFailOnEveryRank) {
  CommOptions options;
  options.timeout_ms = 3000;  // a rank left waiting fails the pair, not the run
  auto comm = World(options);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(CheckMismatches(*comm, MismatchAfter::kRefused), "") << "rank " << comm->rank();
}

TEST(World, AbortEndsAWait) {
  auto comm = World();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(CheckAbort(*comm), "");
}

}  // namespace
}  // namespace testing
}  // namespace weft
