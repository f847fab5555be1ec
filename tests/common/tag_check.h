// Conformance checks of tagged point-to-point messages and receives from
// any source, shared by every
// backend's tests as p2p_check.h is: each runs on one rank, every rank calls
// the same checks in the same order, and each returns "" when the backend
// conforms, else what went wrong. Payloads are p2p_check.h's (a pure
// function of seed, sender, receiver and message), receive buffers are
// poisoned before every call.
//
//   EXPECT_EQ(CheckTags(*comm, seed), "");
#ifndef WEFT_TESTS_COMMON_TAG_CHECK_H_
#define WEFT_TESTS_COMMON_TAG_CHECK_H_

#include <cstdint>
#include <string>

#include "comm/communicator.h"

namespace weft {
namespace testing {

// Host memory. Every rank sends to the next rank and receives from the
// previous one:
//  - three messages on three tags (one past any eager threshold), received
//    in the opposite order by tag;
//  - twenty messages on one tag, each past the rendezvous size of MPI and
//    UCX, then one on another tag, which is received first: a tag never
//    waits behind another's sends;
//  - messages on tags 0 to 3 (the tags collectives use inside the MPI and
//    UCX backends) left in flight across an all-to-all and an all-reduce,
//    then received: users' tags never meet a collective's messages;
//  - Send/Recv are tag 0, with either form on either side;
//  - receives by tag in reverse order before the sends, inside a group;
//  - tagged sends and receives on a host stream;
//  - receives on host streams of their own, issued before an all-reduce and
//    the sends on another: no receive holds back the calls after it, and
//    two receives on one tag take the messages in the order issued;
//  - a receive whose message is sent only after a later receive (another
//    tag) has completed: receives of other tags do not wait for each other.
// Tags -1 and WEFT_TAG_MAX + 1 are refused (InvalidArgument naming the tag)
// and WEFT_TAG_MAX itself works.
std::string CheckTags(Communicator& comm, uint64_t seed);

// Receives from any source, rank 0 taking what every rank sends it
// (itself included):
//  - one message from each rank, past any eager threshold: each sender
//    reported once, with its own data;
//  - two messages from each rank on one tag: each sender's in its order;
//  - a receive naming rank 1 first, then the rest from any source;
//  - inside a group, the receives before the sends; on a host stream, the
//    sender written once the stream has synchronised;
//  - another tag's messages are left alone, and a NULL source works.
// Count 0 matches nothing and reports -1; a bad tag is refused and leaves
// *source as it was.
std::string CheckAnySource(Communicator& comm, uint64_t seed);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_TAG_CHECK_H_
