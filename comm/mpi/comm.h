// The MPI backend: host memory over OpenMPI point-to-point.
//
// The world communicator is a duplicate of MPI_COMM_WORLD (weft's traffic
// never mixes with the application's), a split is MPI_Comm_split of its
// parent, and each MpiComm owns and frees its MPI_Comm and that
// communicator's own duplicate, on which the users' tagged sends and
// receives travel (they never meet a collective's messages, whatever tag). Collectives are not
// MPI's own but P2pComm's: on one node shared-memory rounds (comm/p2p/shm.h),
// elsewhere the shared point-to-point schedules (comm/p2p) on this backend's
// polling engine (pipeline.h), so that
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

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/p2p/comm.h"
#include "comm/mpi/pipeline.h"

namespace weft {
namespace mpi {

class MpiComm final : public p2p::P2pComm {
 public:
  // Takes ownership of `comm` and its duplicate `users` (freed in the
  // destructor). `oversubscribed`: more ranks on this node than cores, so
  // waits yield at once.
  MpiComm(MPI_Comm comm, MPI_Comm users, int rank, int size, bool oversubscribed, const CommOptions& options);
  ~MpiComm() override;
  // Collective: the shared-memory rounds when every rank is on this node,
  // set up over MPI (MPI_Comm_split_type, MPI_Ibcast, MPI_Iallreduce).
  absl::Status AttachSharedMemory();
  Backend backend() const override { return Backend::kMpi; }

 protected:
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override;

 private:
  absl::Status RunSchedule(Schedule& s, int window) override { return RunPipeline(s, window, MpiWait()); }
  p2p::Outbox::Wire SendWire() override { return mpi::SendWire(users_); }
  WaitSpec MpiWait() const;

  MPI_Comm comm_;
  MPI_Comm users_;
};

// The world communicator: MPI_COMM_WORLD duplicated (initialising MPI first
// if nobody has).
absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(const CommOptions& options);
// A communicator of some of MPI_COMM_WORLD's ranks, rank i being
// world_ranks[i], made by those ranks alone (MPI_Comm_create_group, with
// `tag` telling apart groups made at once; initialising MPI first if nobody
// has). It blocks until every member has called it: the caller makes sure
// they all are on their way (weftCommInitStore: after the store exchange).
absl::StatusOr<std::unique_ptr<Communicator>> InitGroup(const std::vector<int>& world_ranks, int tag,
                                                        const CommOptions& options);

}  // namespace mpi
}  // namespace weft

#endif  // WEFT_COMM_MPI_COMM_H_
