// What the UCX backend adds to the conformance suite (collectives_test.cc
// with WEFT_TEST_BACKEND=ucx): every UCX communicator of a process shares
// one worker, told apart by the id in each message's tag (comm/ucx).
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/registry.h"
#include "comm/ucx/comm.h"
#include "comm/ucx/node.h"
#include "gtest/gtest.h"

namespace weft {
namespace testing {
namespace {

std::unique_ptr<Communicator> UcxWorld() {
  auto comm = InitWorld(Backend::kUcx, CommOptions{});
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? std::move(*comm) : nullptr;
}

uint32_t IdOf(const Communicator& c) { return dynamic_cast<const ucx::UcxComm&>(c).id(); }

// Every rank of `comm` holds the same value.
void ExpectAgreed(Communicator& comm, int64_t v, const char* what) {
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  ASSERT_TRUE(comm.AllGather(&v, all.data(), 1, DataType::kInt64, nullptr).ok());
  for (int64_t x : all) EXPECT_EQ(x, v) << what << " differs between ranks (rank " << comm.rank() << ")";
}

// Two communicators over the same processes run collectives of the same
// shapes at once, from two threads, through the shared worker: each must
// see only its own messages. Sizes cover the direct exchange and the ring.
TEST(Ucx, CommunicatorsSharingTheWorkerDoNotSeeEachOthersMessages) {
  if (FindBackend(Backend::kUcx) == nullptr) GTEST_SKIP() << "the UCX backend is not built";
  auto a = UcxWorld();
  ASSERT_NE(a, nullptr);
  auto b = a->Split(0, a->rank());
  ASSERT_TRUE(b.ok()) << b.status();
  Communicator& cb = **b;
  EXPECT_NE(IdOf(*a), IdOf(cb));
  ExpectAgreed(*a, IdOf(*a), "the world's id");
  ExpectAgreed(cb, IdOf(cb), "the duplicate's id");
  const int n = a->size(), r = a->rank();
  auto run = [n, r](Communicator& c, float scale, std::string* error) {
    for (size_t count : {size_t{3}, size_t{1000}, size_t{200000}}) {
      for (int iter = 0; iter < 5; ++iter) {
        std::vector<float> x(count);
        for (size_t j = 0; j < count; ++j) x[j] = scale * static_cast<float>(r + 1) + static_cast<float>(j % 7);
        const absl::Status s = c.AllReduce(x.data(), x.data(), count, DataType::kFloat32, RedOp::kSum, nullptr);
        if (!s.ok()) {
          *error = s.ToString();
          return;
        }
        for (size_t j = 0; j < count; ++j) {
          const float want = scale * static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n * (j % 7));
          if (x[j] != want) {
            *error = "count " + std::to_string(count) + " element " + std::to_string(j) + ": " +
                     std::to_string(x[j]) + " instead of " + std::to_string(want);
            return;
          }
        }
      }
    }
  };
  std::string ea, eb;
  std::thread t([&] { run(*a, 1000.0f, &ea); });
  run(cb, 1.0f, &eb);
  t.join();
  EXPECT_EQ(ea, "") << "world, rank " << r;
  EXPECT_EQ(eb, "") << "duplicate, rank " << r;
}

// A split's communicators get ids no communicator of their processes has
// had (ids only grow), and destroying one waits for nobody: the even half
// destroys its communicator at once while the odd half still runs
// collectives on its own.
TEST(Ucx, SplitIdsAreNewAndDestroyIsLocal) {
  if (FindBackend(Backend::kUcx) == nullptr) GTEST_SKIP() << "the UCX backend is not built";
  auto world = UcxWorld();
  ASSERT_NE(world, nullptr);
  const int r = world->rank();
  auto half = world->Split(r % 2, -r);  // reversed order inside each half
  ASSERT_TRUE(half.ok()) << half.status();
  ASSERT_NE(*half, nullptr);
  EXPECT_GT(IdOf(**half), IdOf(*world));
  ExpectAgreed(**half, IdOf(**half), "the half's id");
  EXPECT_EQ((*half)->size(), (world->size() + (r % 2 == 0 ? 1 : 0)) / 2);
  if (r % 2 == 0) {
    half->reset();
  } else {
    for (int i = 0; i < 20; ++i) {
      int64_t x = 1;
      ASSERT_TRUE((*half)->AllReduce(&x, &x, 1, DataType::kInt64, RedOp::kSum, nullptr).ok());
      EXPECT_EQ(x, (*half)->size());
    }
  }
  EXPECT_TRUE(world->Barrier().ok());
  auto none = world->Split(-1, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

// Under the block policy a rank waiting for a late peer sleeps on the
// worker's event fd (ucx/node.h) instead of napping: the receive of rank 0
// waits 300 ms for rank 1's message, in sleeps on the event fd, and gets it.
// Point-to-point, so the bytes go over UCX with or without shared memory.
TEST(Ucx, BlockingWaitSleepsOnTheWorkersEventFd) {
  if (FindBackend(Backend::kUcx) == nullptr) GTEST_SKIP() << "the UCX backend is not built";
  CommOptions options;
  options.wait = WaitPolicy::kBlock;
  auto made = InitWorld(Backend::kUcx, options);
  ASSERT_TRUE(made.ok()) << made.status();
  Communicator& world = **made;
  if (world.size() < 2) GTEST_SKIP() << "needs a peer to wait for (world size " << world.size() << ")";
  auto node = ucx::Node::Get();
  ASSERT_TRUE(node.ok()) << node.status();
  if (!(*node)->CanSleep()) GTEST_SKIP() << "this UCX build's transports raise no events (ucp_worker_get_efd failed)";
  std::vector<int32_t> buf(1000);
  if (world.rank() == 1) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<int32_t>(7 * i + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE(world.Send(buf.data(), buf.size(), DataType::kInt32, 0, nullptr).ok());
  } else if (world.rank() == 0) {
    const ucx::Node::SleepCounts before = (*node)->sleep_counts();
    const absl::Status s = world.Recv(buf.data(), buf.size(), DataType::kInt32, 1, nullptr);
    ASSERT_TRUE(s.ok()) << s;
    const ucx::Node::SleepCounts after = (*node)->sleep_counts();
    for (size_t i = 0; i < buf.size(); i += 97) EXPECT_EQ(buf[i], static_cast<int32_t>(7 * i + 1)) << i;
    // Each sleep lasts at most the engine's longest (2 ms): a 300 ms wait
    // takes many, and none of them is a nap.
    EXPECT_GE(after.sleeps - before.sleeps, 10u) << "woken " << after.woken - before.woken;
  }
  EXPECT_TRUE(world.Barrier().ok());
}

}  // namespace
}  // namespace testing
}  // namespace weft
