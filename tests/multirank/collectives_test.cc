// The collective conformance suite (tests/common) on the in-process backend,
// ranks as threads, world sizes 1 to 4.
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/common/collective_check.h"
#include "tests/common/conformance.h"
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

INSTANTIATE_TEST_SUITE_P(InProcess, WorldSize, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return absl::StrCat("ranks", p.param); });

}  // namespace
}  // namespace testing
}  // namespace weft
