// What the point-to-point backends (MPI, UCX) share beyond their wire: the
// collectives (shared-memory rounds when every rank is on one node, else the
// schedules of comm/p2p/collectives.h), reused scratch, segment sizes, and
// the rule that a failed collective breaks the communicator, and the check
// (check.h) that every rank called the same collective, which a mismatch
// fails on every rank, breaking the communicator too. A send carries its
// count and dtype in a header that the receive checks first.
//
// A backend derives from P2pComm and supplies its transport as RunSchedule
// (mpi/pipeline.h: MPI_Isend/MPI_Irecv; ucx/pipeline.h: UCP tag messages)
// and SendWire (the same wire for eager sends, outbox.h), and split, and
// calls AttachSharedMemory once with its own bootstrap. Its destructor must
// call StopSends first: the outbox's thread uses the wire.
#ifndef WEFT_COMM_P2P_COMM_H_
#define WEFT_COMM_P2P_COMM_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/direct.h"
#include "comm/p2p/backoff.h"
#include "comm/p2p/check.h"
#include "comm/p2p/collectives.h"
#include "comm/p2p/hierarchy.h"
#include "comm/p2p/hang.h"
#include "comm/p2p/outbox.h"
#include "comm/p2p/schedule.h"
#include "comm/p2p/shm.h"
#include "comm/p2p/topology.h"
#include "core/status.h"

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
  // Polling without yielding when each rank on this node has a core.
  std::chrono::microseconds spin{200};
  // Shared-memory rounds (shm.h), when every rank is on one node
  // (CommOptions::segment_bytes overrides, as for the ring).
  size_t shm_round_bytes = 256 << 10;
  // The largest message of an eager send: large, since each message of a
  // rendezvous protocol costs a round trip, and within MPI's int counts.
  size_t eager_message_bytes = 16 << 20;
  // The segment of all-to-all, gather and scatter (exchange.h), as large for
  // the same reason: their blocks go from the sender's buffer straight to the
  // receiver's, so a segment pipelines nothing and each one costs a
  // rendezvous (CommOptions::segment_bytes overrides, as for the ring).
  size_t exchange_segment_bytes = 16 << 20;
};

// Offers the direct-buffer reductions (comm/direct.h): pieces and ready
// extents in the shared-memory rounds on one node, the defaults elsewhere.
class P2pComm : public Communicator, public DirectReduce {
 public:
  // "hierarchical": a multi-node world whose large calls take the hierarchy
  // (topology.h; smaller ones still run the point-to-point schedules).
  const char* engine() const override {
    return shm_ != nullptr ? "shm" : hier_ != nullptr ? "hierarchical" : "p2p";
  }
  // `oversubscribed`: more ranks on this node than cores, so waits yield at once.
  P2pComm(int rank, int size, const CommOptions& options, bool oversubscribed, const Tuning& tuning = Tuning{});
  ~P2pComm() override;
  bool shared_memory() const { return shm_ != nullptr; }
  // Where the ranks run (empty on one node), and the hierarchy of a
  // multi-node world (null: flat; topology.h says when).
  const Topology& topology() const { return topo_; }
  const Hierarchy* hierarchy() const { return hier_.get(); }

 protected:
  // Collective: sets up the shared-memory rounds when every rank is on this
  // node (and WEFT_SHM allows it), and the hang watch's view of the peers
  // (their control pages there, else the TCP status channel); else finds
  // the topology and, where it has several nodes, the hierarchy
  // (topology.h). Errors when the ranks could not agree, or WEFT_HIER is
  // bad or not the same on every rank.
  absl::Status AttachSharedMemory(const ShmBootstrap& bootstrap);
  // Collective, after the shared-memory rounds are settled: the hang
  // watch's board (shm_'s control pages, else the TCP status channel).
  absl::Status AttachWatch();

  absl::Status DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                           void* stream) override;
  absl::Status DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                               void* stream) override;
  absl::Status DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream) override;
  absl::Status DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root,
                           void* stream) override;
  absl::Status DoBarrier() override;
  // Sends are eager (outbox.h); the rest are exchange.h's schedules, on one
  // node too (they move each byte once, as the shared-memory rounds would).
  absl::Status DoSend(const void* send, size_t count, DataType t, int peer, int tag, void* stream) override;
  absl::Status DoRecv(void* recv, size_t count, DataType t, int peer, int tag, int* source, void* stream) override;
  absl::Status DoReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                        void* stream) override;
  absl::Status DoGather(const void* send, void* recv, size_t sendcount, DataType t, int root, void* stream) override;
  absl::Status DoScatter(const void* send, void* recv, size_t recvcount, DataType t, int root, void* stream) override;
  absl::Status DoAllToAllv(const void* send, const std::vector<size_t>& sendcounts, const std::vector<size_t>& sdispls,
                           void* recv, const std::vector<size_t>& recvcounts, const std::vector<size_t>& rdispls,
                           DataType t, void* stream) override;
  // Aborts the hierarchy's communicators too.
  void DoAbort() override;
  // A receive is a schedule of its own on the transport, which takes
  // concurrent callers (the outbox's thread already is one); the state it
  // shares with the other calls and receives (broken_, the outbox, the
  // receive numbers) is guarded, and the hang watch's boards guard theirs.
  bool ReceivesApart() const override { return true; }
  // On one node the shared-memory rounds stage from and store into pieces.
  bool ReducesPieces() const override { return shm_ != nullptr; }
  absl::Status DoAllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op) override;
  // On one node the ready extents ride on a shared-memory barrier.
  bool AgreesReadyInCall() const override { return shm_ != nullptr; }
  absl::StatusOr<size_t> DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t,
                                          RedOp op) override;

  // The transport: runs `s` to completion with up to `window` lanes in
  // flight. Failures pass through Settle (Run does it).
  virtual absl::Status RunSchedule(Schedule& s, int window) = 0;
  absl::Status Run(Schedule& s, int window) { return Settle(Explain(RunSchedule(s, window))); }
  // The transport for eager sends; called once, at the first send.
  virtual Outbox::Wire SendWire() = 0;
  // Waits until the sends made so far are delivered (or failed, or the
  // communicator was aborted), then stops the outbox: the first thing a
  // backend's destructor does.
  void StopSends() { outbox_.reset(); }

  // A transport's failure (say, a connection reset) when a peer's process
  // is known to be gone: the hang watch's error naming that rank and its
  // node, the transport's words appended. Anything else as it is.
  absl::Status Explain(absl::Status s) const;
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
  // The largest message of an eager send (a larger send is several): the
  // segment setting when one is given, else Tuning::eager_message_bytes.
  size_t EagerBytes() const { return options().segment_bytes != 0 ? SegmentBytes() : tuning_.eager_message_bytes; }
  // How this rank waits: its timeout, abort, how long to spin, its hang
  // watch, its policy.
  Patience Wait() const { return {rank(), options().timeout_ms, this, spin_, &watch_, wait_}; }
  // Collective: fails (and breaks the communicator) unless every rank made
  // `call`: one barrier of the shared-memory rounds on one node, else an
  // all-gather of the calls in log2(N) steps. OK at once with one rank or
  // WEFT_CHECK_CALLS=0.
  absl::Status Check(const Call& call);
  // The start of a split: a barrier, which checks that every rank splits.
  absl::Status SplitBarrier();
  // This communicator as the shared collectives' engine.
  Engine MakeEngine();
  // A collective's progress for the hang watch: Track(call) before it
  // runs, Finish(status) with its result (completed when OK).
  void Track(const Call& call) { watch_.Enter(call); }
  absl::Status Finish(absl::Status s) {
    if (s.ok()) watch_.Done();
    return s;
  }

 private:
  const Tuning tuning_;
  const std::chrono::microseconds spin_;
  // options().wait, or for kDefault kBlock, and kYield where this node's
  // ranks outnumber its cores: a sleeping waiter there is woken a time slice
  // late, and its peer needs the core a yield hands over.
  const WaitPolicy wait_;
  FirstError broken_;  // set once, by the call that failed (receives run beside the others)
  std::unique_ptr<NodeShm> shm_;  // null: point-to-point only
  // After shm_ (its board reads the segment), before outbox_ (whose thread waits with it).
  HangWatch watch_;
  std::unique_ptr<unsigned char[]> scratch_;
  std::unique_ptr<Outbox> outbox_;  // made by the first send, under outbox_mu_
  mutable std::mutex outbox_mu_;     // Usable() reads outbox_ from a receive's thread too
  size_t scratch_bytes_ = 0;
  // The node key exchange, the table and the hierarchy's splits.
  absl::Status AttachHierarchy(const absl::StatusOr<HierTable>& table, const char* spec);
  // Whether a call of `bytes` goes hierarchical.
  bool Hierarchical(HierKind kind, size_t bytes) const {
    return hier_ != nullptr && UseHierarchy(table_, kind, bytes, topo_);
  }

  Topology topo_;
  HierTable table_;
  std::unique_ptr<Hierarchy> hier_;
  // WEFT_CHECK_CALLS; off in a hierarchy's own communicators, whose calls
  // the world's check has already matched.
  bool check_;
  uint64_t checked_ = 0;  // point-to-point checks, the same count on every rank
  // Per (peer, tag): sends and receives so far, numbered in their headers.
  // Receives of different tags or peers run at once: received_ under its lock.
  std::map<std::pair<int, int>, uint64_t> sent_, received_;
  std::mutex received_mu_;
};

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_COMM_H_
