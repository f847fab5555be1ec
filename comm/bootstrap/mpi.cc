// The MPI bootstrap: MPI_COMM_WORLD as a Bootstrap, for UCX and NCCL worlds
// under mpirun/srun (built only with MPI). Its all-gathers are nonblocking
// MPI collectives polled to a deadline, so a rank that never arrives is a
// Timeout rather than a hang.
#include <mpi.h>
#include <sched.h>

#include <chrono>
#include <memory>
#include <thread>

#include "comm/bootstrap/bootstrap.h"
#include "comm/bootstrap/launch.h"
#include "comm/bootstrap/mpi_runtime.h"
#include "comm/bootstrap/net.h"
#include "core/status.h"

namespace weft {
namespace bootstrap {
namespace {

absl::Status Check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  return SystemError("%s failed: %s", call, mpi::ErrorString(rc));
}

class MpiBootstrap final : public Bootstrap {
 public:
  MpiBootstrap(int rank, int size, int timeout_ms) : Bootstrap(rank, size), timeout_ms_(timeout_ms) {}
  std::string Describe() const override { return "MPI_COMM_WORLD"; }

  absl::Status AllGather(const void* mine, void* all, size_t bytes) override {
    if (bytes > static_cast<size_t>(1) << 30) return InternalError("an MPI bootstrap all-gather of %d bytes", bytes);
    MPI_Request req = MPI_REQUEST_NULL;
    {
      mpi::CallLock lock;
      RETURN_IF_ERROR(Check(MPI_Iallgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes),
                                           MPI_BYTE, MPI_COMM_WORLD, &req),
                            "MPI_Iallgather (bootstrap)"));
    }
    const Deadline deadline = After(timeout_ms_);
    std::chrono::microseconds pause(1);
    for (;;) {
      int done = 0;
      {
        mpi::CallLock lock;
        RETURN_IF_ERROR(Check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test (bootstrap)"));
      }
      if (done) return absl::OkStatus();
      if (Clock::now() >= deadline) {
        // The request cannot be cancelled (a collective); MPI owns it now.
        return Timeout("rank %d: not every process of MPI_COMM_WORLD reached weft's bootstrap within %d ms",
                       rank(), timeout_ms_);
      }
      if (pause.count() < 64) sched_yield();
      else std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }

 private:
  const int timeout_ms_;
};

absl::StatusOr<std::unique_ptr<Bootstrap>> World(int timeout_ms) {
  RETURN_IF_ERROR(mpi::EnsureInitialized());
  int rank = 0, size = 0;
  {
    mpi::CallLock lock;
    RETURN_IF_ERROR(Check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank"));
    RETURN_IF_ERROR(Check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size"));
  }
  return std::unique_ptr<Bootstrap>(std::make_unique<MpiBootstrap>(rank, size, timeout_ms));
}

[[maybe_unused]] const bool kRegistered = RegisterMpi({&mpi::Active, &World});

}  // namespace
}  // namespace bootstrap
}  // namespace weft
