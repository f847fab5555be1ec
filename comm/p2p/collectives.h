// The collectives of the point-to-point backends (MPI, UCX): each picks a
// schedule by message size and hands it to the backend's engine.
//   direct  (a message of at most Engine::direct_bytes per rank): every rank
//           sends to every peer at once, one step, and reductions then
//           combine all ranks' data in rank order 0..N-1, the same on every
//           rank;
//   ring    (larger reductions and gathers, ring.h): segmented, pipelined,
//           each chunk reduced on one rank in a fixed order;
//   chain   (larger broadcasts, ring.h): segmented, pipelined.
// Either way every rank ends with the same bits, and the algorithm depends
// only on arguments all ranks share, so all ranks pick the same one.
//
//   p2p::Engine e{rank(), size(), segment, direct, window, scratch, run};
//   return p2p::AllReduce(e, send, recv, count, t, op);
//
// Arguments are the checked ones of Communicator's Do* hooks; one rank and
// empty messages are handled here (a copy, or nothing).
#ifndef WEFT_COMM_P2P_COLLECTIVES_H_
#define WEFT_COMM_P2P_COLLECTIVES_H_

#include <cstddef>
#include <functional>

#include "absl/status/status.h"
#include "comm/p2p/schedule.h"
#include "core/dtype.h"

namespace weft {
namespace p2p {

// What a backend lends the shared collectives.
struct Engine {
  int rank = 0;
  int size = 1;
  size_t segment_bytes = 0;  // the ring's and chain's pipelining segment
  size_t direct_bytes = 0;   // messages of at most this many bytes per rank go direct
  int window = 1;            // segments in flight per collective
  // Scratch of at least `bytes`, reused across calls (the backend's).
  std::function<void*(size_t bytes)> scratch;
  // Runs a schedule to completion with up to `window` lanes in flight.
  std::function<absl::Status(Schedule&, int window)> run;
  // The personalised collectives' segment (exchange.h); 0: segment_bytes.
  size_t exchange_bytes = 0;
};

absl::Status AllReduce(const Engine& e, const void* send, void* recv, size_t count, DataType t, RedOp op);
absl::Status ReduceScatter(const Engine& e, const void* send, void* recv, size_t recvcount, DataType t, RedOp op);
absl::Status AllGather(const Engine& e, const void* send, void* recv, size_t sendcount, DataType t);
absl::Status Broadcast(const Engine& e, const void* send, void* recv, size_t bytes, int root);
// Dissemination: ceil(log2 N) rounds; in round k each rank sends a byte to
// rank + 2^k and receives one from rank - 2^k.
absl::Status Barrier(const Engine& e);

// memcpy unless the two are one buffer (in place) or bytes is 0.
void CopyIfDistinct(void* dst, const void* src, size_t bytes);

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_COLLECTIVES_H_
