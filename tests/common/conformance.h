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

// The direct-buffer reductions (comm/direct.h), which every host backend
// offers (a communicator without them fails these).
// AllReducePieces: where the backend ReducesPieces, three pieces of a
// logical buffer with gaps between them, in separate allocations, in and out
// of place, inside one chunk or round, across a boundary and over many,
// blocking and on a host stream, int32 sum and float32 average: every
// element right on every rank; pieces that go back, overlap (in their
// offsets, or one piece's memory another's) or overflow are refused with
// InvalidArgument. Elsewhere: Unsupported, naming the backend.
std::string CheckAllReducePieces(Communicator& comm);

// AllReduceReady on every host backend (the agreement fused into the call
// where AgreesReadyInCall, else one small all-reduce more): buffers filled
// before the calls are reduced by the first call, the rest merged into it;
// ranks with different ready extents reduce the least of them and leave
// the rest untouched until a later call; float32 average on a host stream
// and int32 sum blocking, over many chunks or rounds, every element right.
// Ranks that pass different `upto` all fail with InvalidUsage; a rank short
// of its `upto` fails alone while its peers finish; a NULL buffer and an
// `upto` beyond the buffer are InvalidArgument; the communicator stays usable.
std::string CheckAllReduceReady(Communicator& comm);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_CONFORMANCE_H_
