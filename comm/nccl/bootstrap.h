// How the NCCL backend finds its world and shares rank 0's ncclUniqueId.
//
// Two implementations, chosen by meson.build: bootstrap_mpi.cc (MPI found:
// MPI_COMM_WORLD when a launcher started the process, comm/mpi/bootstrap.h)
// and bootstrap_local.cc (no MPI: always one rank). comm.cc is the same for
// both and never asks which one it got.
//
//   ASSIGN_OR_RETURN(Place p, FindPlace());
//   RETURN_IF_ERROR(BroadcastFromRoot(p, &id, sizeof(id)));
#ifndef WEFT_COMM_NCCL_BOOTSTRAP_H_
#define WEFT_COMM_NCCL_BOOTSTRAP_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace weft {
namespace nccl {

struct Place {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the processes of this node
};

// True when a launcher started this process (registry.h's `launched`).
bool Launched();
absl::StatusOr<Place> FindPlace();
// True on every rank when every rank's `ok` is: decided together, so that a
// rank that cannot go on never leaves the others blocked in ncclCommInitRank.
absl::StatusOr<bool> AllOk(const Place& p, bool ok);
// Rank 0's `bytes` at `data` to every rank.
absl::Status BroadcastFromRoot(const Place& p, void* data, size_t bytes);

}  // namespace nccl
}  // namespace weft

#endif  // WEFT_COMM_NCCL_BOOTSTRAP_H_
