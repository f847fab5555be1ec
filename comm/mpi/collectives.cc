// MPI collectives: on one node the shared-memory rounds (shm.h), elsewhere
// P2pComm's: the shared point-to-point schedules (comm/p2p) on this
// backend's engine (pipeline.h).
#include "comm/mpi/comm.h"
#include "core/status.h"

namespace weft {
namespace mpi {

absl::Status MpiComm::DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, void*) {
  RETURN_IF_ERROR(Usable());
  if (shm_ != nullptr && size() > 1 && count > 0) return Settle(shm_->AllReduce(send, recv, count, t, op, Wait()));
  return P2pComm::DoAllReduce(send, recv, count, t, op, nullptr);
}

absl::Status MpiComm::DoAllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op) {
  RETURN_IF_ERROR(Usable());
  return Settle(shm_->AllReducePieces(pieces, t, op, Wait()));
}

absl::StatusOr<size_t> MpiComm::DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t,
                                                 RedOp op) {
  RETURN_IF_ERROR(Usable());
  if (size() == 1) return offer;
  if (shm_ == nullptr) return Communicator::DoAllReduceReady(data, reduced, offer, upto, t, op);
  absl::StatusOr<size_t> agreed = shm_->AllReduceReady(data, reduced, offer, upto, t, op, Wait());
  // Ranks that disagree all fail at the same point, before any round: the
  // communicator is still in step. Anything else breaks it.
  if (!agreed.ok() && !absl::IsFailedPrecondition(agreed.status())) return Settle(agreed.status());
  return agreed;
}

absl::Status MpiComm::DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                      void*) {
  RETURN_IF_ERROR(Usable());
  if (shm_ != nullptr && size() > 1 && recvcount > 0) {
    return Settle(shm_->ReduceScatter(send, recv, recvcount, t, op, Wait()));
  }
  return P2pComm::DoReduceScatter(send, recv, recvcount, t, op, nullptr);
}

absl::Status MpiComm::DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void*) {
  RETURN_IF_ERROR(Usable());
  if (shm_ != nullptr && size() > 1 && sendcount > 0) {
    // The shared-memory rounds leave this rank's own block to the caller.
    const size_t block = sendcount * ElementSize(t);
    p2p::CopyIfDistinct(static_cast<unsigned char*>(recv) + static_cast<size_t>(rank()) * block, send, block);
    return Settle(shm_->AllGather(send, recv, sendcount, t, Wait()));
  }
  return P2pComm::DoAllGather(send, recv, sendcount, t, nullptr);
}

absl::Status MpiComm::DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root, void*) {
  RETURN_IF_ERROR(Usable());
  const size_t bytes = count * ElementSize(t);
  if (shm_ != nullptr && size() > 1 && bytes > 0) {
    if (rank() == root) p2p::CopyIfDistinct(recv, send, bytes);
    return Settle(shm_->Broadcast(send, recv, bytes, root, Wait()));
  }
  return P2pComm::DoBroadcast(send, recv, count, t, root, nullptr);
}

}  // namespace mpi
}  // namespace weft
