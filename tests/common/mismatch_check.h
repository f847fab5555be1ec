// The mismatch matrix: ranks that make different calls must fail, never
// return wrong elements. Shared by every backend's tests (as conformance.h):
// every rank calls it, it returns "" when the backend conforms, else what
// went wrong.
//
//   EXPECT_EQ(CheckMismatches(*world, MismatchAfter::kRefused), "");
#ifndef WEFT_TESTS_COMMON_MISMATCH_CHECK_H_
#define WEFT_TESTS_COMMON_MISMATCH_CHECK_H_

#include <string>

#include "comm/communicator.h"

namespace weft {
namespace testing {

// What a communicator does after its ranks disagreed: refuses every later
// call (the MPI and UCX backends, whose ranks may have taken different steps)
// or goes on with the next call that matches (in-process ranks, which fail
// before any rank touches another's buffer).
enum class MismatchAfter { kRefused, kGoesOn };

// Needs 2 ranks or more (else ""). For every pair of different calls out of
// a list that varies one thing at a time (collective, dtype, count, op,
// root, and sizes that take the shared-memory rounds' and the ring's
// multi-segment paths), on a fresh communicator split off `world`: the last
// rank makes one call and every other rank the other. Each must fail on
// every rank with InvalidUsage, after which the communicator behaves as
// `after` says. Then a receive that expects another count or dtype than its
// send carries fails on the receiver. Stops after a few failing pairs
// (agreed over `world`), so a backend that hangs on them fails in bounded
// time; `world`'s timeout bounds each wait.
std::string CheckMismatches(Communicator& world, MismatchAfter after);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_MISMATCH_CHECK_H_
