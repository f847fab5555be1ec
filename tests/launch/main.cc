// gtest main for the launched-world tests (tests/launch/launch.py starts
// one process per rank; WEFT_TEST_RANK says which): rank 0 prints the
// report, the others their failures (tests/common/rank_listeners.h). Each
// process exits with its own result, and the launcher fails the run when any
// rank fails. A test past its time limit ends the process with exit code 3
// (the launcher then stops the rest).
#include <cstdlib>

#include "gtest/gtest.h"
#include "tests/common/rank_listeners.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* r = std::getenv("WEFT_TEST_RANK");
  weft::testing::InstallRankListeners(r != nullptr ? std::atoi(r) : 0, [] { std::_Exit(3); });
  return RUN_ALL_TESTS();
}
