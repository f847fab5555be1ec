// Conformance checks of point-to-point sends and receives, groups and the
// uneven all-to-all, shared by every backend's tests (as conformance.h):
// each runs on one rank, every rank calls the same checks in the same
// order, and each returns "" when the backend conforms, else what went wrong.
//
// Payloads are pure functions of (seed, sender, receiver, message, element),
// so a receiver computes what it must get without trusting any
// communication; receive buffers are poisoned before every call and compared
// bit for bit, with guard bytes (and the gaps between all-to-all blocks) that
// must stay poisoned.
//
//   EXPECT_EQ(CheckSendRecv(*comm, seed), "");
#ifndef WEFT_TESTS_COMMON_P2P_CHECK_H_
#define WEFT_TESTS_COMMON_P2P_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tests/common/poison.h"

namespace weft {
namespace testing {

// The payload of message `msg` from `from` to `to`: random bytes, except
// that every element is a finite, non-zero value of its type (no NaN bits,
// so the poison is never a right answer).
std::vector<unsigned char> Payload(uint64_t seed, int from, int to, int msg, size_t count, DataType t);

// "" when got[0, want.size()) is `want`, else the first byte that differs.
std::string Compare(const unsigned char* got, const std::vector<unsigned char>& want, const std::string& what);

// Host memory. Every rank sends to the next rank, then receives from the
// previous one (a ring exchange in which every rank sends first), blocking,
// for every dtype at counts 0, 1, 7 and 1000 and float32 at 2^20+3; three
// messages of different sizes to one peer, received in order; a send
// whose buffer is overwritten as soon as it returns; a send to itself; and a
// send and receive on a host stream followed by a blocking all-reduce.
std::string CheckSendRecv(Communicator& comm, uint64_t seed);

// Groups: every rank receives from both neighbours before it sends to them,
// inside a group (torch's batch_isend_irecv), with a collective in the group
// too; nested groups; GroupEnd without GroupStart is InvalidUsage; a refused
// call inside a group is refused at once and the group goes on.
std::string CheckGroups(Communicator& comm, uint64_t seed);

// All-to-allv with uneven counts (0 to some), gaps between the blocks and
// displacements out of rank order, for float32, bfloat16, int64 and uint8,
// blocking and on a host stream, plus one large block per rank.
std::string CheckAllToAllv(Communicator& comm, uint64_t seed);

// The last rank receives from rank 0, which sends nothing, then from any
// rank: Timeout naming the peer (or any rank) within the communicator's
// (short) timeout, and no source reported. Other ranks do nothing.
std::string CheckRecvTimeout(Communicator& comm);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_P2P_CHECK_H_
