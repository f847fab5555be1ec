// The MPI backend: host memory over OpenMPI point-to-point.
//
// The world communicator is a duplicate of MPI_COMM_WORLD (weft's traffic
// never mixes with the application's), a split is MPI_Comm_split of its
// parent, and each MpiComm owns and frees its MPI_Comm. Collectives are not
// MPI's own: on one node they are shared-memory rounds (shm.h), elsewhere the
// shared point-to-point schedules (comm/p2p) on the polling engine
// (pipeline.h), so that
//   - floating-point results are bit-identical on every rank: each chunk of
//     a reduction is combined on one rank in one fixed order, then copied;
//   - float16/bfloat16 are reduced in float32 and rounded once (core/reduce.h);
//   - large messages run as cache-sized segments, several in flight;
//   - a missing peer is a Timeout after options().timeout_ms, and Abort()
//     ends a wait at once: no call blocks forever.
// After a timeout the communicator refuses further collectives (its peers may
// be anywhere in the schedule); destroy it.
//
//   ASSIGN_OR_RETURN(auto world, InitWorld(Backend::kMpi, options));  // under mpirun
#ifndef WEFT_COMM_MPI_COMM_H_
#define WEFT_COMM_MPI_COMM_H_

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>

#include "comm/communicator.h"
#include "comm/p2p/comm.h"
#include "comm/mpi/pipeline.h"
#include "comm/mpi/shm.h"

namespace weft {
namespace mpi {

// What MPI adds to the point-to-point tuning (p2p::Tuning).
struct Tuning {
  // Polling without yielding when each rank on this node has a core.
  std::chrono::microseconds spin{200};
  // Shared-memory rounds (shm.h), when every rank is on one node
  // (CommOptions::segment_bytes overrides, as for the ring).
  size_t shm_round_bytes = 256 << 10;
};

class MpiComm final : public p2p::P2pComm {
 public:
  // Takes ownership of `comm` (freed in the destructor).
  // `oversubscribed`: more ranks on this node than cores, so waits yield at once.
  MpiComm(MPI_Comm comm, int rank, int size, bool oversubscribed, const CommOptions& options);
  ~MpiComm() override;
  // Collective: sets up the shared-memory path when every rank is on this
  // node (and WEFT_SHM allows it). Errors only when the ranks could not agree.
  absl::Status AttachSharedMemory();
  bool shared_memory() const { return shm_ != nullptr; }
  Backend backend() const override { return Backend::kMpi; }

 protected:
  // On one node the shared-memory rounds, elsewhere P2pComm's collectives.
  absl::Status DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                           void* stream) override;
  absl::Status DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                               void* stream) override;
  absl::Status DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream) override;
  absl::Status DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root,
                           void* stream) override;
  absl::Status DoBarrier() override;
  // On one node the shared-memory rounds stage from and store into pieces.
  bool ReducesPieces() const override { return shm_ != nullptr; }
  absl::Status DoAllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op) override;
  // On one node the ready extents ride on a shared-memory barrier.
  bool AgreesReadyInCall() const override { return shm_ != nullptr; }
  absl::StatusOr<size_t> DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t,
                                          RedOp op) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override;

 private:
  WaitSpec Wait() const { return {comm_, rank(), options().timeout_ms, this, spin_}; }
  absl::Status RunSchedule(Schedule& s, int window) override { return RunPipeline(s, window, Wait()); }

  MPI_Comm comm_;
  Tuning mpi_tuning_;
  std::chrono::microseconds spin_;
  std::unique_ptr<NodeShm> shm_;  // null: point-to-point only
};

// The world communicator: MPI_COMM_WORLD duplicated (initialising MPI first
// if nobody has).
absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(const CommOptions& options);

}  // namespace mpi
}  // namespace weft

#endif  // WEFT_COMM_MPI_COMM_H_
