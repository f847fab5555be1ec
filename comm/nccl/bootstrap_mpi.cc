// The NCCL backend's world over MPI (built when MPI was found).
#include <mpi.h>

#include "comm/mpi/bootstrap.h"
#include "comm/nccl/bootstrap.h"
#include "core/status.h"

namespace weft {
namespace nccl {

bool Launched() { return mpi::Launched(); }

absl::StatusOr<Place> FindPlace() {
  Place p;
  if (!mpi::Launched()) return p;
  RETURN_IF_ERROR(mpi::EnsureInitialized());
  mpi::CallLock lock;
  MPI_Comm node = MPI_COMM_NULL;
  int e = MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  if (e == MPI_SUCCESS) e = MPI_Comm_size(MPI_COMM_WORLD, &p.size);
  if (e == MPI_SUCCESS) e = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, p.rank, MPI_INFO_NULL, &node);
  if (e == MPI_SUCCESS) e = MPI_Comm_rank(node, &p.local_rank);
  if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
  if (e != MPI_SUCCESS) return SystemError("nccl init: finding this rank in MPI_COMM_WORLD: %s", mpi::ErrorString(e));
  return p;
}

absl::StatusOr<bool> AllOk(const Place& p, bool ok) {
  if (p.size == 1) return ok;
  int mine = ok ? 1 : 0, all = 0;
  mpi::CallLock lock;
  const int e = MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (e != MPI_SUCCESS) return SystemError("nccl init: MPI_Allreduce: %s", mpi::ErrorString(e));
  return all == 1;
}

absl::Status BroadcastFromRoot(const Place& p, void* data, size_t bytes) {
  if (p.size == 1) return absl::OkStatus();
  mpi::CallLock lock;
  const int e = MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (e != MPI_SUCCESS) return SystemError("nccl init: MPI_Bcast of %zu bytes: %s", bytes, mpi::ErrorString(e));
  return absl::OkStatus();
}

}  // namespace nccl
}  // namespace weft
