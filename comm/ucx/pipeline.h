// The UCX backend's engine: runs a point-to-point Schedule
// (comm/p2p/schedule.h) with UCP tag messages on the process's worker
// (node.h), polling with p2p::Backoff so ranks that share cores still
// progress; never waits forever (Timeout after the communicator's timeout
// without progress, Aborted at once on abort).
//
// A message's 64-bit tag is  comm id (20 bits) | sender's rank (20) | the
// schedule's tag (24), and receives match all of it: communicators share the
// worker without seeing each other's traffic, and UCP's tag matching keeps
// the order of messages from one sender with one tag, which is all the
// schedules need (as MPI's non-overtaking rule). The users' point-to-point
// messages carry p2p::kUserTagBit in the schedule's tag, above every
// collective's, so no user tag meets a collective's message.
//
//   Link link{node, id, rank, peers};
//   RETURN_IF_ERROR(RunPipeline(ring, window, link, {rank, timeout_ms, this, spin}));
#ifndef WEFT_COMM_UCX_PIPELINE_H_
#define WEFT_COMM_UCX_PIPELINE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "comm/p2p/backoff.h"
#include "comm/p2p/outbox.h"
#include "comm/p2p/schedule.h"
#include "comm/ucx/node.h"

namespace weft {
namespace ucx {

inline constexpr int kIdBits = 20, kRankBits = 20, kTagBits = 24;
inline constexpr uint32_t kMaxIds = 1u << kIdBits;
inline constexpr int kMaxRanks = 1 << kRankBits;

// One communicator's view of the worker.
struct Link {
  Node* node = nullptr;
  uint32_t id = 0;               // the communicator's id (Node::Claim)
  int rank = 0;
  std::vector<int> peers;        // by communicator rank: its process (Node::AddPeer)
};

absl::Status RunPipeline(p2p::Schedule& s, int window, const Link& link, const p2p::Patience& patience);

// Eager sends (p2p/outbox.h) as UCP tag sends on the link's worker; `link`
// must outlive the outbox.
p2p::Outbox::Wire SendWire(const Link* link);

}  // namespace ucx
}  // namespace weft

#endif  // WEFT_COMM_UCX_PIPELINE_H_
