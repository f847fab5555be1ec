// The conformance suite over a world of processes (world_suite.cc). The
// executable that links it defines TestWorld: a fresh world communicator
// of the backend under test over every process, made its own way.
#ifndef WEFT_TESTS_COMMON_WORLD_SUITE_H_
#define WEFT_TESTS_COMMON_WORLD_SUITE_H_

#include <memory>

#include "comm/communicator.h"

namespace weft {
namespace testing {

// The backend the worlds are of.
Backend TestBackend();
// nullptr (after a test failure saying why) when the world could not be made.
std::unique_ptr<Communicator> TestWorld(const CommOptions& options);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_WORLD_SUITE_H_
