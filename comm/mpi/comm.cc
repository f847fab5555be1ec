#include "comm/mpi/comm.h"

#include <algorithm>
#include <utility>

#include "comm/bootstrap/mpi_runtime.h"
#include "comm/registry.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace mpi {
namespace {

// Wraps a new MPI communicator (taking ownership) after making MPI report
// its errors to weft instead of aborting the job, and duplicates it for the
// users' point-to-point messages (collective over it; nonblocking, so a
// rank that never arrives is a timeout, not a hang).
absl::StatusOr<std::unique_ptr<Communicator>> Wrap(MPI_Comm comm, const CommOptions& options) {
  int rank = 0, size = 0;
  MPI_Comm users = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  {
    CallLock lock;
    absl::Status s = CheckMpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    if (s.ok()) s = CheckMpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    if (s.ok()) s = CheckMpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    if (s.ok()) s = CheckMpi(MPI_Comm_idup(comm, &users, &req), "MPI_Comm_idup");
    if (!s.ok()) {
      MPI_Comm_free(&comm);
      return s;
    }
  }
  // On failure the duplicate's request may be neither cancelled nor freed
  // (MPI 3.1, 5.12): both communicators are left to MPI_Finalize.
  RETURN_IF_ERROR(WaitAll(1, &req, {comm, rank, options.timeout_ms, nullptr}, "duplicating a communicator"));
  {
    CallLock lock;
    RETURN_IF_ERROR(CheckMpi(MPI_Comm_set_errhandler(users, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  }
  auto c = std::make_unique<MpiComm>(comm, users, rank, size, Oversubscribed(), options);
  RETURN_IF_ERROR(c->AttachSharedMemory());
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace

MpiComm::MpiComm(MPI_Comm comm, MPI_Comm users, int rank, int size, bool oversubscribed, const CommOptions& options)
    : P2pComm(rank, size, options, oversubscribed), comm_(comm), users_(users) {}

MpiComm::~MpiComm() {
  StopSends();  // its thread sends on comm_
  // After a failure pending sends may still read the scratch (MPI cannot
  // cancel them): P2pComm leaks it rather than let MPI read freed memory.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // MPI freed every communicator itself
  CallLock lock;
  MPI_Comm_free(&users_);
  MPI_Comm_free(&comm_);
}

WaitSpec MpiComm::MpiWait() const {
  const p2p::Patience w = Wait();
  return {comm_, w.rank, w.timeout_ms, w.owner, w.spin, w.watch, w.policy, users_};
}

absl::Status MpiComm::AttachSharedMemory() {
  p2p::ShmBootstrap b;
  b.all_on_one_node = [this]() -> absl::StatusOr<bool> {
    CallLock lock;
    MPI_Comm node = MPI_COMM_NULL;
    RETURN_IF_ERROR(CheckMpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                             "MPI_Comm_split_type"));
    int node_size = 0;
    const int rc = MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    RETURN_IF_ERROR(CheckMpi(rc, "MPI_Comm_size"));
    return node_size == size();
  };
  b.broadcast = [this](void* bytes, size_t n) {
    MPI_Request req;
    {
      CallLock lock;
      RETURN_IF_ERROR(CheckMpi(MPI_Ibcast(bytes, static_cast<int>(n), MPI_BYTE, 0, comm_, &req), "MPI_Ibcast"));
    }
    return WaitAll(1, &req, MpiWait(), "MPI_Ibcast");
  };
  b.all_min = [this](int* v) {
    MPI_Request req;
    {
      CallLock lock;
      RETURN_IF_ERROR(CheckMpi(MPI_Iallreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MIN, comm_, &req), "MPI_Iallreduce"));
    }
    return WaitAll(1, &req, MpiWait(), "MPI_Iallreduce");
  };
  return P2pComm::AttachSharedMemory(b);
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiComm::DoSplit(int color, int key) {
  // MPI_Comm_split blocks with no timeout; once every rank has passed this
  // barrier it cannot wait on a missing one.
  RETURN_IF_ERROR(SplitBarrier());
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

absl::StatusOr<std::unique_ptr<Communicator>> InitGroup(const std::vector<int>& world_ranks, int tag,
                                                        const CommOptions& in) {
  const CommOptions options = ResolveOptions(in);
  RETURN_IF_ERROR(EnsureInitialized());
  MPI_Comm comm = MPI_COMM_NULL;
  int world_rank = 0, rank = -1;
  {
    CallLock lock;
    RETURN_IF_ERROR(CheckMpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), "MPI_Comm_rank"));
    const auto me = std::find(world_ranks.begin(), world_ranks.end(), world_rank);
    if (me == world_ranks.end()) {
      return InvalidUsage("MPI_COMM_WORLD rank %d is not among the %d ranks of the group it was asked to join",
                          world_rank, world_ranks.size());
    }
    MPI_Group world = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
    absl::Status s = CheckMpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
    if (s.ok()) {
      s = CheckMpi(MPI_Group_incl(world, static_cast<int>(world_ranks.size()), world_ranks.data(), &members),
                   "MPI_Group_incl");
    }
    // Collective over the members only; there is no nonblocking form.
    if (s.ok()) s = CheckMpi(MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &comm), "MPI_Comm_create_group");
    if (members != MPI_GROUP_NULL) MPI_Group_free(&members);
    if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
    RETURN_IF_ERROR(s);
    if (comm == MPI_COMM_NULL) return InternalError("MPI_Comm_create_group gave no communicator to a member");
    RETURN_IF_ERROR(CheckMpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank"));
    if (rank != me - world_ranks.begin()) {
      MPI_Comm_free(&comm);
      return InternalError("MPI_Comm_create_group made MPI_COMM_WORLD rank %d rank %d, not %d", world_rank, rank,
                           me - world_ranks.begin());
    }
  }
  return Wrap(comm, options);
}

namespace {

[[maybe_unused]] const bool kRegistered =
    RegisterBackend({Backend::kMpi, MemKind::kHost, &InitWorld, nullptr, nullptr, &InitGroup});

}  // namespace
}  // namespace mpi
}  // namespace weft
