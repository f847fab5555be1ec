#include "comm/mpi/comm.h"

#include <algorithm>
#include <utility>

#include "comm/mpi/bootstrap.h"
#include "comm/registry.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace mpi {
namespace {

// Wraps a new MPI communicator (taking ownership) after making MPI report
// its errors to weft instead of aborting the job.
absl::StatusOr<std::unique_ptr<Communicator>> Wrap(MPI_Comm comm, const CommOptions& options) {
  int rank = 0, size = 0;
  {
    CallLock lock;
    absl::Status s = CheckMpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    if (s.ok()) s = CheckMpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    if (s.ok()) s = CheckMpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    if (!s.ok()) {
      MPI_Comm_free(&comm);
      return s;
    }
  }
  auto c = std::make_unique<MpiComm>(comm, rank, size, Oversubscribed(), options);
  RETURN_IF_ERROR(c->AttachSharedMemory());
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace

MpiComm::MpiComm(MPI_Comm comm, int rank, int size, bool oversubscribed, const CommOptions& options)
    : P2pComm(rank, size, options, p2p::Tuning{}), comm_(comm),
      spin_(oversubscribed ? std::chrono::microseconds(0) : mpi_tuning_.spin) {}

MpiComm::~MpiComm() {
  // After a failure pending sends may still read the scratch (MPI cannot
  // cancel them): P2pComm leaks it rather than let MPI read freed memory.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // MPI freed every communicator itself
  CallLock lock;
  MPI_Comm_free(&comm_);
}

absl::Status MpiComm::AttachSharedMemory() {
  const size_t round = options().segment_bytes != 0 ? SegmentBytes() : mpi_tuning_.shm_round_bytes;
  ASSIGN_OR_RETURN(shm_, NodeShm::Create(comm_, rank(), size(), round, Wait()));
  return absl::OkStatus();
}

absl::Status MpiComm::DoBarrier() {
  RETURN_IF_ERROR(Usable());
  if (shm_ != nullptr) return Settle(shm_->Barrier(Wait()));
  MPI_Request req;
  {
    CallLock lock;
    RETURN_IF_ERROR(CheckMpi(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier"));
  }
  return Settle(WaitAll(1, &req, Wait(), "MPI_Ibarrier"));
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiComm::DoSplit(int color, int key) {
  // MPI_Comm_split blocks with no timeout; once every rank has passed this
  // barrier it cannot wait on a missing one.
  RETURN_IF_ERROR(DoBarrier());
  MPI_Comm out = MPI_COMM_NULL;
  {
    CallLock lock;
    RETURN_IF_ERROR(CheckMpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out),
                             "MPI_Comm_split"));
  }
  if (out == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
  return Wrap(out, options());
}

absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(const CommOptions& in) {
  const CommOptions options = ResolveOptions(in);
  RETURN_IF_ERROR(EnsureInitialized());
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request req;
  int world_rank = 0;
  {
    CallLock lock;
    RETURN_IF_ERROR(CheckMpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank"));
    // Nonblocking, so a rank that never arrives is a timeout, not a hang.
    RETURN_IF_ERROR(CheckMpi(MPI_Comm_idup(MPI_COMM_WORLD, &comm, &req), "MPI_Comm_idup"));
  }
  RETURN_IF_ERROR(WaitAll(1, &req, {MPI_COMM_WORLD, world_rank, options.timeout_ms, nullptr},
                          "duplicating MPI_COMM_WORLD"));
  return Wrap(comm, options);
}

namespace {

// auto picks MPI under a launcher, and also when the application has
// initialised MPI itself (it is an MPI program, whatever started it).
bool LaunchedOrInitialized() {
  if (Launched()) return true;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

[[maybe_unused]] const bool kRegistered =
    RegisterBackend({Backend::kMpi, MemKind::kHost, &LaunchedOrInitialized, &InitWorld});

}  // namespace
}  // namespace mpi
}  // namespace weft
