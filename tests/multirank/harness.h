// Runs a test body on N in-process ranks (one thread each), with a time
// limit so that a hang fails the test instead of blocking CI.
//
//   RunRanks(4, [&](Communicator& comm) { return CheckSplit(comm, seed); });
//
// The body returns "" on success or what went wrong; each rank's message is
// reported as a test failure. After `limit` the harness fails the test and
// aborts every communicator (so blocked ranks return); if a rank still does
// not return, it exits the process, since the thread cannot be reclaimed.
// WEFT_TEST_LIMIT_SCALE=k multiplies the limit (sanitized builds).
#ifndef WEFT_TESTS_MULTIRANK_HARNESS_H_
#define WEFT_TESTS_MULTIRANK_HARNESS_H_

#include <chrono>
#include <functional>
#include <string>

#include "comm/communicator.h"

namespace weft {
namespace testing {

using RankBody = std::function<std::string(Communicator& comm)>;

void RunRanks(int nranks, const RankBody& body, std::chrono::seconds limit = std::chrono::seconds(120),
              CommOptions options = {});

// The same for bodies that use gtest's EXPECT_/ASSERT_ macros directly
// (they are thread-safe): failures are reported as they happen.
inline void RunRanksExpecting(int nranks, const std::function<void(Communicator& comm)>& body,
                              std::chrono::seconds limit = std::chrono::seconds(120), CommOptions options = {}) {
  RunRanks(nranks, RankBody([&body](Communicator& comm) {
             body(comm);
             return std::string();
           }),
           limit, options);
}

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_MULTIRANK_HARNESS_H_
