// What the point-to-point backends (MPI, UCX) share beyond the schedules:
// the collectives through comm/p2p/collectives.h, reused scratch, segment
// sizes, and the rule that a failed collective breaks the communicator.
//
// A backend derives from P2pComm and supplies its transport as RunSchedule
// (mpi/pipeline.h: MPI_Isend/MPI_Irecv; ucx/pipeline.h: UCP tag messages),
// plus barrier and split. It may override a collective to take a faster
// path of its own (MPI's shared-memory rounds on one node) and fall back to
// P2pComm's.
#ifndef WEFT_COMM_P2P_COMM_H_
#define WEFT_COMM_P2P_COMM_H_

#include <algorithm>
#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "comm/p2p/collectives.h"
#include "comm/p2p/schedule.h"

namespace weft {
namespace p2p {

// Tuning of the collectives; defaults suit a few ranks on one node.
struct Tuning {
  // Pipelining segment (CommOptions::segment_bytes overrides).
  size_t segment_bytes = 256 << 10;
  // Lanes (segments) in flight per collective.
  int window = 4;
  // Messages of at most this many bytes per rank go straight to every peer
  // in one step (latency bound) instead of round the ring (bandwidth bound).
  size_t direct_bytes = 16 << 10;
};

class P2pComm : public Communicator {
 public:
  P2pComm(int rank, int size, const CommOptions& options, const Tuning& tuning);
  ~P2pComm() override;

 protected:
  absl::Status DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                           void* stream) override;
  absl::Status DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                               void* stream) override;
  absl::Status DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream) override;
  absl::Status DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root,
                           void* stream) override;

  // The transport: runs `s` to completion with up to `window` lanes in
  // flight. Failures pass through Settle (Run does it).
  virtual absl::Status RunSchedule(Schedule& s, int window) = 0;
  absl::Status Run(Schedule& s, int window) { return Settle(RunSchedule(s, window)); }

  // OK, or why this communicator can no longer run collectives.
  absl::Status Usable() const;
  // A collective's status, passed through; a failure breaks the communicator
  // (its peers may be anywhere in the collective, and after a timeout a
  // late message may still land in a buffer of a later call).
  absl::Status Settle(absl::Status s);
  bool broken() const { return !broken_.ok(); }
  // Scratch of at least `bytes` (new[]-aligned), reused across calls. After
  // a failure it is leaked, not freed: a transfer the transport could not
  // cancel may still read or write it.
  void* Scratch(size_t bytes);
  size_t SegmentBytes() const;
  // Messages up to this size go direct; a segment setting below
  // Tuning::direct_bytes lowers it too (a message is pipelined once it
  // spans several segments), which is also how tests reach the ring with
  // small counts.
  size_t DirectBytes() const { return std::min(tuning_.direct_bytes, SegmentBytes()); }
  const Tuning& tuning() const { return tuning_; }
  // This communicator as the shared collectives' engine.
  Engine MakeEngine();

 private:
  const Tuning tuning_;
  absl::Status broken_;  // set once, by the collective that failed
  std::unique_ptr<unsigned char[]> scratch_;
  size_t scratch_bytes_ = 0;
};

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_COMM_H_
