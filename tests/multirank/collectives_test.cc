// The collective conformance suite (tests/common) on the in-process backend,
// ranks as threads, world sizes 1 to 4.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/direct.h"
#include "gtest/gtest.h"
#include "tests/common/collective_check.h"
#include "tests/common/conformance.h"
#include "tests/common/mismatch_check.h"
#include "tests/common/p2p_check.h"
#include "tests/common/tag_check.h"
#include "tests/multirank/harness.h"

namespace weft {
namespace testing {
namespace {

constexpr uint64_t kSeed = 0x5eedf00d;
constexpr int kMaxFailures = 10;  // per rank, so one bug does not flood the log

// Runs `cases` in order on one rank; the first few failures, joined.
std::string RunCases(Communicator& comm, const std::vector<Case>& cases) {
  std::string err;
  int failed = 0;
  for (size_t i = 0; i < cases.size() && !comm.aborted(); ++i) {
    std::string e = CheckCase(comm, cases[i], kSeed + i);
    if (e.empty()) continue;
    if (++failed <= kMaxFailures) absl::StrAppend(&err, "\n", e);
  }
  if (failed > kMaxFailures) absl::StrAppend(&err, "\n... ", failed, " cases failed");
  return err;
}

class WorldSize : public ::testing::TestWithParam<int> {};

TEST_P(WorldSize, CollectiveMatrix) {
  const std::vector<Case> cases = MatrixCases(GetParam());
  RunRanks(GetParam(), [&](Communicator& comm) { return RunCases(comm, cases); });
}

TEST_P(WorldSize, BadArgumentsAreRefusedAndLeaveTheCommunicatorUsable) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckBadArguments(comm); });
}

TEST_P(WorldSize, Split) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckSplit(comm, kSeed); });
}

TEST_P(WorldSize, HostStreamsKeepIssueOrder) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckHostStreams(comm, kSeed); });
}

TEST_P(WorldSize, LoneCollectiveTimesOut) {
  CommOptions options;
  options.timeout_ms = 300;
  RunRanks(GetParam(), [](Communicator& comm) { return CheckTimeout(comm); }, std::chrono::seconds(60), options);
}

TEST_P(WorldSize, AbortEndsAWait) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckAbort(comm); });
}

// In-process ranks share each call's chunks: a rank still claiming in one
// call must never take a chunk of the next. Back-to-back calls whose sizes
// change every time (so the chunk counts do), with every rank checking
// every element, catch a chunk done twice, skipped or done for the wrong call.
TEST_P(WorldSize, BackToBackCallsOfChangingSizes) {
  RunRanks(GetParam(), [](Communicator& comm) -> std::string {
    const int n = comm.size(), r = comm.rank();
    for (int it = 0; it < 60; ++it) {
      // 0 to about 1.2 MiB of float32: zero, one and many chunks.
      const size_t count = it % 5 == 0 ? 0 : (size_t{1} << (it % 19)) + static_cast<size_t>(it) * 977;
      std::vector<float> x(count * n), y(count * n);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(r + static_cast<int>(i % 7));
      absl::Status s;
      switch (it % 3) {
        case 0:  // all-reduce in place: sum over r of (r + i%7)
          s = comm.AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, RedOp::kSum, nullptr);
          for (size_t i = 0; s.ok() && i < x.size(); ++i) {
            if (x[i] != static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(i % 7))) {
              return absl::StrFormat("call %d all_reduce of %zu: x[%zu] = %g", it, x.size(), i, x[i]);
            }
          }
          break;
        case 1:  // reduce-scatter: my block of the sums
          s = comm.ReduceScatter(x.data(), y.data(), count, DataType::kFloat32, RedOp::kSum, nullptr);
          for (size_t i = 0; s.ok() && i < count; ++i) {
            const size_t k = r * count + i;
            if (y[i] != static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(k % 7))) {
              return absl::StrFormat("call %d reduce_scatter of %zu: y[%zu] = %g", it, count, i, y[i]);
            }
          }
          break;
        default:  // all-gather of the first `count` elements: block q holds q + i%7
          s = comm.AllGather(x.data(), y.data(), count, DataType::kFloat32, nullptr);
          for (size_t i = 0; s.ok() && i < y.size(); ++i) {
            const float want = static_cast<float>(static_cast<int>(i / count) + static_cast<int>(i % count % 7));
            if (y[i] != want) return absl::StrFormat("call %d all_gather of %zu: y[%zu] = %g", it, count, i, y[i]);
          }
      }
      if (!s.ok()) return absl::StrFormat("call %d: %s", it, s.ToString());
    }
    return "";
  });
}

// Ranks that call different collectives (another count, type, op, root or
// kind) all get the same weftInvalidUsage naming the difference, and none
// touches a peer's buffer; then the communicator is broken, as over MPI and
// UCX: every later call is refused, naming the mismatch, and its world
// (the communicator it was split from) goes on.
TEST(InProcess, RanksThatDisagreeAllFailAndTheCommunicatorBreaks) {
  for (int n = 2; n <= 4; ++n) {
    RunRanks(n, [](Communicator& world) -> std::string {
      const int last = world.size() - 1;
      std::vector<float> x(16, 1.0f), y(16 * world.size());
      using Call = std::function<absl::Status(Communicator&)>;
      const Call calls[] = {
          [&](Communicator& c) {
            return c.AllReduce(x.data(), x.data(), c.rank() == last ? 9 : 8, DataType::kFloat32, RedOp::kSum,
                               nullptr);
          },
          [&](Communicator& c) {
            return c.rank() == 0 ? c.AllGather(x.data(), y.data(), 8, DataType::kFloat32, nullptr)
                                 : c.AllReduce(x.data(), x.data(), 8, DataType::kFloat32, RedOp::kSum, nullptr);
          },
          [&](Communicator& c) {
            return c.Broadcast(x.data(), x.data(), 8, DataType::kFloat32, c.rank() == last ? 1 : 0, nullptr);
          },
      };
      const std::string want[] = {
          absl::StrFormat("rank 0 called all_reduce of 8 float32 (sum), rank %d called all_reduce of 9 float32 (sum)",
                          last),
          "rank 0 called all_gather of 8 float32, rank 1 called all_reduce of 8 float32 (sum)",
          absl::StrFormat("rank 0 called broadcast of 8 float32 from root 0, rank %d called broadcast of 8 float32 "
                          "from root 1", last),
      };
      for (int i = 0; i < 3; ++i) {
        absl::StatusOr<std::unique_ptr<Communicator>> sub = world.Split(0, world.rank());
        if (!sub.ok()) return "split: " + sub.status().ToString();
        const absl::Status s = calls[i](**sub);
        if (s.code() != absl::StatusCode::kFailedPrecondition || s.message().find(want[i]) == std::string::npos) {
          return absl::StrFormat("mismatch %d: got %s, want weftInvalidUsage with \"%s\"", i, s.ToString(), want[i]);
        }
        const absl::Status next = (*sub)->AllReduce(x.data(), x.data(), 16, DataType::kFloat32, RedOp::kSum, nullptr);
        if (next.code() != absl::StatusCode::kFailedPrecondition ||
            next.message().find("unusable") == std::string::npos || next.message().find(want[i]) == std::string::npos) {
          return absl::StrFormat("after mismatch %d: got %s, want it refused naming the mismatch", i, next.ToString());
        }
      }
      for (float v : x) {
        if (v != 1.0f) return "a refused call changed the buffer";
      }
      const absl::Status ok = world.AllReduce(x.data(), x.data(), 16, DataType::kFloat32, RedOp::kSum, nullptr);
      if (!ok.ok() || x[15] != static_cast<float>(world.size())) {
        return absl::StrFormat("the world's next call: %s, x[15] = %g", ok.ToString(), x[15]);
      }
      return "";
    });
  }
}

TEST_P(WorldSize, MismatchedCallsFailOnEveryRank) {
  CommOptions options;
  options.timeout_ms = 3000;
  RunRanks(GetParam(), [](Communicator& comm) { return CheckMismatches(comm, MismatchAfter::kRefused); },
           std::chrono::seconds(120), options);
}

TEST_P(WorldSize, SendRecv) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckSendRecv(comm, kSeed); });
}

TEST_P(WorldSize, Groups) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckGroups(comm, kSeed); });
}

TEST_P(WorldSize, Tags) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckTags(comm, kSeed); });
}

TEST_P(WorldSize, AnySource) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckAnySource(comm, kSeed); });
}

TEST_P(WorldSize, AllToAllv) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckAllToAllv(comm, kSeed); });
}

TEST_P(WorldSize, LoneRecvTimesOut) {
  CommOptions options;
  options.timeout_ms = 300;
  RunRanks(GetParam(), [](Communicator& comm) { return CheckRecvTimeout(comm); }, std::chrono::seconds(60), options);
}

// The rooted and personalised collectives are compared like the others:
// another root, count or type on one rank fails every rank alike, naming
// both calls; an all-to-allv whose counts disagree names both ranks' counts;
// a receive of another count than was sent names both. None touches a
// buffer, and the next matching call works.
TEST(InProcess, RootedAndPersonalisedCallsThatDisagreeAllFail) {
  for (int n = 2; n <= 4; ++n) {
    RunRanks(n, [](Communicator& world) -> std::string {
      // Each mismatch breaks its communicator: one split of `world` for each.
      std::vector<std::unique_ptr<Communicator>> subs;
      for (int i = 0; i < 6; ++i) {
        absl::StatusOr<std::unique_ptr<Communicator>> sub = world.Split(0, world.rank());
        if (!sub.ok()) return "split: " + sub.status().ToString();
        subs.push_back(std::move(*sub));
      }
      Communicator& comm = world;
      const int last = comm.size() - 1, r = comm.rank();
      std::vector<float> x(16, 1.0f), y(16 * comm.size(), 2.0f);
      std::vector<size_t> counts(static_cast<size_t>(comm.size()), 1), displs(counts.size());
      for (size_t q = 0; q < displs.size(); ++q) displs[q] = q;
      std::vector<size_t> rcounts = counts;
      if (r == last) rcounts[0] = 2, displs[0] = 0;  // expects 2 from rank 0, which sends 1
      std::vector<size_t> rdispls(counts.size());
      for (size_t q = 0, at = 0; q < rdispls.size(); at += rcounts[q], ++q) rdispls[q] = at;
      const absl::Status s[] = {
          subs[0]->Reduce(x.data(), y.data(), 8, DataType::kFloat32, RedOp::kSum, r == last ? 1 : 0, nullptr),
          subs[1]->Gather(x.data(), y.data(), r == last ? 3 : 4, DataType::kFloat32, 0, nullptr),
          subs[2]->Scatter(y.data(), x.data(), 4, r == last ? DataType::kInt32 : DataType::kFloat32, 0, nullptr),
          subs[3]->AllToAllv(x.data(), counts.data(), displs.data(), y.data(), rcounts.data(), rdispls.data(),
                         DataType::kFloat32, nullptr),
          r == 0 ? subs[4]->AllToAll(x.data(), y.data(), 2, DataType::kFloat32, nullptr)
                 : subs[4]->Reduce(x.data(), y.data(), 2, DataType::kFloat32, RedOp::kMax, 0, nullptr),
      };
      const std::string want[] = {
          absl::StrFormat("rank 0 called reduce of 8 float32 (sum) to root 0, rank %d called reduce of 8 float32 "
                          "(sum) to root 1", last),
          absl::StrFormat("rank 0 called gather of 4 float32 to root 0, rank %d called gather of 3 float32 to root 0",
                          last),
          absl::StrFormat("rank 0 called scatter of 4 float32 from root 0, rank %d called scatter of 4 int32 from "
                          "root 0", last),
          absl::StrFormat("rank 0 sends 1 float32 to rank %d, which receives 2 from rank 0", last),
          "rank 0 called all_to_all of float32, rank 1 called reduce of 2 float32 (max) to root 0",
      };
      for (int i = 0; i < 5; ++i) {
        if (s[i].code() != absl::StatusCode::kFailedPrecondition ||
            s[i].message().find(want[i]) == std::string::npos) {
          return absl::StrFormat("mismatch %d: got %s, want weftInvalidUsage with \"%s\"", i, s[i].ToString(),
                                 want[i]);
        }
      }
      for (float v : x) {
        if (v != 1.0f) return "a refused call changed its buffer";
      }
      // A receive of another count than was sent: the receiver is told both.
      const int to = (r + 1) % comm.size(), from = (r - 1 + comm.size()) % comm.size();
      absl::Status sent = subs[5]->Send(x.data(), 5, DataType::kFloat32, to, nullptr);
      absl::Status got = subs[5]->Recv(y.data(), 6, DataType::kFloat32, from, nullptr);
      const std::string both = absl::StrFormat("rank %d sent 5 float32, but rank %d receives 6 float32", from, r);
      if (!sent.ok() || got.code() != absl::StatusCode::kFailedPrecondition ||
          got.message().find(both) == std::string::npos) {
        return absl::StrFormat("send/recv counts: %s / %s, want \"%s\"", sent.ToString(), got.ToString(), both);
      }
      const absl::Status ok = comm.Reduce(x.data(), y.data(), 16, DataType::kFloat32, RedOp::kSum, last, nullptr);
      if (!ok.ok() || (r == last && y[15] != static_cast<float>(comm.size()))) {
        return absl::StrFormat("the next call: %s, y[15] = %g", ok.ToString(), y[15]);
      }
      return "";
    });
  }
}

TEST_P(WorldSize, AllReducePieces) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckAllReducePieces(comm); });
}

TEST_P(WorldSize, AllReduceReady) {
  RunRanks(GetParam(), [](Communicator& comm) { return CheckAllReduceReady(comm); });
}

// In-process ranks compare their calls: ranks whose pieces differ (the same
// extent, cut differently) all fail alike.
TEST(InProcess, RanksWithDifferentPiecesAllFail) {
  for (int n = 2; n <= 4; ++n) {
    RunRanks(n, [](Communicator& comm) -> std::string {
      std::vector<float> x(10, 1.0f);
      float* p = x.data();
      const std::vector<Piece> mine = comm.rank() == comm.size() - 1
                                          ? std::vector<Piece>{{p, p, 0, 4}, {p + 4, p + 4, 4, 6}}
                                          : std::vector<Piece>{{p, p, 0, 10}};
      const absl::Status s = FindDirectReduce(comm)->AllReducePieces(mine, DataType::kFloat32, RedOp::kSum, nullptr);
      if (s.code() != absl::StatusCode::kFailedPrecondition ||
          s.message().find("with other piece offsets or counts") == std::string::npos) {
        return absl::StrFormat("differing pieces: got %s", s.ToString());
      }
      return "";
    });
  }
}

INSTANTIATE_TEST_SUITE_P(InProcess, WorldSize, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return absl::StrCat("ranks", p.param); });

}  // namespace
}  // namespace testing
}  // namespace weft
