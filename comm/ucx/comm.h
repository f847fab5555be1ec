// The UCX backend: host memory over UCP tag messages, on any launcher: the
// world's bootstrap (comm/bootstrap: MPI's under mpirun, weft's own under
// torchrun, Slurm or a unique id) only exchanges the workers' addresses.
//
// Collectives are P2pComm's (comm/p2p), as the MPI backend's: shared-memory
// rounds when every rank is on one node (WEFT_SHM=0 turns them off), else
// the direct, ring and chain schedules over UCX. The same guarantees:
// bit-identical results on every rank, float16/bfloat16 reduced in float32
// and rounded once, cache-sized segments in flight, a Timeout after
// options().timeout_ms without progress, Abort() ending a wait at once, and
// a communicator that refuses further collectives after a failure. The
// bytes move on whatever UCX picks (shared memory and CMA on one node, TCP
// or RDMA between nodes; UCX_TLS chooses), which is how a cluster whose MPI
// was built without UCX still gets its RDMA network.
//
// Every UCX communicator of a process shares the process's worker
// (node.h); a communicator is an id in the message tags plus its
// ranks' processes, so destroying one is local and a split needs no MPI.
//
//   ASSIGN_OR_RETURN(auto world, InitWorld(Backend::kUcx, options));  // any launcher
#ifndef WEFT_COMM_UCX_COMM_H_
#define WEFT_COMM_UCX_COMM_H_

#include <memory>

#include "comm/bootstrap/bootstrap.h"
#include "comm/communicator.h"
#include "comm/p2p/comm.h"
#include "comm/ucx/pipeline.h"

namespace weft {
namespace ucx {

class UcxComm final : public p2p::P2pComm {
 public:
  // `oversubscribed`: more ranks on this node than cores, so waits yield at once.
  UcxComm(Link link, int size, bool oversubscribed, const CommOptions& options);
  ~UcxComm() override { StopSends(); }  // its thread sends on link_
  Backend backend() const override { return Backend::kUcx; }
  uint32_t id() const { return link_.id; }
  // Collective: the shared-memory rounds when every rank is on this node,
  // set up over this communicator's own point-to-point schedules.
  absl::Status AttachSharedMemory();

 protected:
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override;

 private:
  absl::Status RunSchedule(p2p::Schedule& s, int window) override;
  p2p::Outbox::Wire SendWire() override { return ucx::SendWire(&link_); }

  const Link link_;
  const bool oversubscribed_;
};

// The world communicator over every rank of `b`. Collective over it.
absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(bootstrap::Bootstrap& b, const CommOptions& options);

}  // namespace ucx
}  // namespace weft

#endif  // WEFT_COMM_UCX_COMM_H_
