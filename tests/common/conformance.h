// Backend-agnostic conformance checks beyond the collective matrix
// (collective_check.h): argument checking, split, host streams, timeouts
// and abort. Each runs on one rank of a communicator; every rank calls the
// same checks in the same order. Each returns "" when the backend conforms,
// else what went wrong (so both the thread-rank and the MPI harness can
// report it the same way).
//
//   EXPECT_EQ(CheckBadArguments(*comm), "");
#ifndef WEFT_TESTS_COMMON_CONFORMANCE_H_
#define WEFT_TESTS_COMMON_CONFORMANCE_H_

#include <cstdint>
#include <string>

#include "comm/communicator.h"

namespace weft {
namespace testing {

// NULL buffers with count > 0, bad enums, root out of range, overflowing
// counts, overlapping buffers, a bogus stream, a bad split color: each is
// refused with InvalidArgument naming the argument, on every rank, and the
// communicator still runs a correct all-reduce afterwards.
std::string CheckBadArguments(Communicator& comm);

// Splits by rank parity with reversed keys, into one color with equal keys,
// and with rank 0 opting out (WEFT_SPLIT_NOCOLOR); checks sizes, ranks and an
// all-reduce on each new communicator.
std::string CheckSplit(Communicator& comm, uint64_t seed);

// Several collectives enqueued on host streams (two streams, then a blocking
// call on the same communicator), synchronised, all results right: the
// communicator's issue order holds across streams and blocking calls.
std::string CheckHostStreams(Communicator& comm, uint64_t seed);

// `comm` has a short timeout. The last rank calls an all-reduce nobody else
// joins: it must return Timeout naming the rank and the collective, and the
// communicator must refuse later collectives. Other ranks do nothing.
std::string CheckTimeout(Communicator& comm);

// The last rank calls an all-reduce nobody else joins while another thread
// aborts the communicator: it must return Aborted promptly. Other ranks do
// nothing.
std::string CheckAbort(Communicator& comm);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_CONFORMANCE_H_
