// The shared-memory collectives' single-copy path (comm/p2p/shm_cma.cc) on
// two ranks of one process: the same bits as the staged rounds where the
// order of a sum matters (inexact float inputs), and a read that fails on
// one rank failing the call on both, without a hang, the pair still usable.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/p2p/shm.h"
#include "tests/unit/two_thread_shm.h"

namespace weft {
namespace p2p {
namespace {

// Runs fn(rank, shm) on two threads over one NodeShm pair made with
// `cma_bytes`; the statuses of both. Skips when no segment can be made.
template <typename Fn>
std::vector<absl::Status> OnPair(size_t cma_bytes, Fn fn) {
  TwoThreadBootstrap boot;
  std::vector<absl::Status> status(2);
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::thread([&, r] {
      absl::StatusOr<std::unique_ptr<NodeShm>> s = NodeShm::Create(r, 2, 64 << 10, cma_bytes, boot.For(r));
      if (!s.ok() || *s == nullptr) {
        status[r] = s.ok() ? absl::UnavailableError("no shared-memory segment") : s.status();
        boot.sync.arrive_and_drop();
        return;
      }
      status[r] = fn(r, **s);
    });
  }
  for (auto& t : ranks) t.join();
  return status;
}

Patience Wait(int rank) { return Patience{rank, 60000, nullptr, std::chrono::microseconds(200), nullptr}; }

TEST(SingleCopy, ProbePassesBetweenThreadsOfOneProcess) {
  size_t agreed[2] = {0, 0};
  auto status = OnPair(4096, [&](int r, NodeShm& shm) {
    agreed[r] = shm.cma_bytes();
    return absl::OkStatus();
  });
  if (absl::IsUnavailable(status[0])) GTEST_SKIP() << status[0];
  EXPECT_EQ(agreed[0], 4096u);
  EXPECT_EQ(agreed[1], 4096u);
}

// Sums of uniform reals, whose bits depend on the order: the single-copy
// all_reduce and reduce_scatter give the rounds' bits on both ranks.
TEST(SingleCopy, SameBitsAsTheRounds) {
  constexpr size_t kCount = 300007;  // several reduction blocks and rounds, a tail
  std::vector<float> in[2];
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& v : in) {
    v.resize(kCount);
    for (auto& x : v) x = d(rng);
  }
  std::vector<float> out[2][2], rs[2][2];  // [path][rank]
  for (int path = 0; path < 2; ++path) {
    auto status = OnPair(path == 0 ? 0 : 1, [&](int r, NodeShm& shm) {
      out[path][r].assign(kCount, 0.0f);
      rs[path][r].assign(kCount / 2, 0.0f);
      absl::Status s = shm.AllReduce(in[r].data(), out[path][r].data(), kCount, DataType::kFloat32, RedOp::kSum,
                                     Wait(r));
      if (!s.ok()) return s;
      return shm.ReduceScatter(in[r].data(), rs[path][r].data(), kCount / 2, DataType::kFloat32, RedOp::kAvg,
                               Wait(r));
    });
    if (absl::IsUnavailable(status[0])) GTEST_SKIP() << status[0];
    ASSERT_TRUE(status[0].ok()) << status[0];
    ASSERT_TRUE(status[1].ok()) << status[1];
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(std::memcmp(out[0][r].data(), out[1][r].data(), kCount * sizeof(float)), 0) << "all_reduce, rank " << r;
    EXPECT_EQ(std::memcmp(rs[0][r].data(), rs[1][r].data(), kCount / 2 * sizeof(float)), 0)
        << "reduce_scatter, rank " << r;
  }
  EXPECT_EQ(std::memcmp(out[1][0].data(), out[1][1].data(), kCount * sizeof(float)), 0) << "ranks disagree";
}

// Rank 1's input has its first page unreadable, and only rank 0 reads that
// page (it is rank 0's chunk): rank 0's read fails, and both ranks fail the
// call (rank 1 naming rank 0) instead of rank 1 returning a wrong result or
// waiting for rank 0. The next call on the pair works.
TEST(SingleCopy, AFailedReadFailsTheCallOnEveryRank) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t count = 2 * page / sizeof(float);  // chunk 0: page 0, chunk 1: page 1
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  std::memset(mem, 0, 2 * page);
  ASSERT_EQ(mprotect(mem, page, PROT_NONE), 0);
  std::vector<float> good(count, 1.0f);
  std::vector<float> out[2] = {std::vector<float>(count), std::vector<float>(count)};
  absl::Status second[2];
  auto status = OnPair(1, [&](int r, NodeShm& shm) {
    const void* send = r == 1 ? mem : good.data();
    absl::Status s = shm.AllReduce(send, out[r].data(), count, DataType::kFloat32, RedOp::kSum, Wait(r));
    second[r] = shm.AllReduce(good.data(), out[r].data(), count, DataType::kFloat32, RedOp::kSum, Wait(r));
    return s;
  });
  munmap(mem, 2 * page);
  if (absl::IsUnavailable(status[0])) GTEST_SKIP() << status[0];
  EXPECT_FALSE(status[0].ok());
  EXPECT_NE(std::string(status[0].message()).find("process_vm_readv"), std::string::npos) << status[0];
  EXPECT_FALSE(status[1].ok());
  EXPECT_NE(std::string(status[1].message()).find("rank 0"), std::string::npos) << status[1];
  ASSERT_TRUE(second[0].ok()) << second[0];
  ASSERT_TRUE(second[1].ok()) << second[1];
  EXPECT_EQ(out[0][count - 1], 2.0f);
  EXPECT_EQ(out[1][0], 2.0f);
}

}  // namespace
}  // namespace p2p
}  // namespace weft
