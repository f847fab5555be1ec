// Which backends this build has, and how a world communicator is made.
//
// Each backend registers itself from its own comm/<backend>/comm.cc at load
// time, so whether a backend exists is decided only by its meson.build and
// shared code never tests HAVE_NCCL or HAVE_MPI. A backend makes a world
// from a bootstrap (comm/bootstrap): MPI's, weft's own socket bootstrap, or
// a one-rank one; it never learns which.
//
//   ASSIGN_OR_RETURN(auto world, InitWorld(Backend::kAuto, options));     // from the launcher
//   ASSIGN_OR_RETURN(auto id, MakeUniqueId());                            // one process
//   ASSIGN_OR_RETURN(auto comm, InitRank(Backend::kAuto, n, id, r, options));  // every rank
#ifndef WEFT_COMM_REGISTRY_H_
#define WEFT_COMM_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/bootstrap/bootstrap.h"
#include "comm/bootstrap/wire.h"
#include "comm/communicator.h"

namespace weft {

struct BackendFactory {
  Backend id;
  MemKind memory;  // the memory kind its collectives work on
  // A world of MPI_COMM_WORLD made with MPI's own means (the MPI backend);
  // nullptr for backends that take a bootstrap.
  absl::StatusOr<std::unique_ptr<Communicator>> (*init_mpi_world)(const CommOptions& options);
  // A world whose ranks found each other through `b`: collective over it.
  // nullptr: the backend makes no worlds that way.
  absl::StatusOr<std::unique_ptr<Communicator>> (*init_bootstrap)(bootstrap::Bootstrap& b,
                                                                  const CommOptions& options);
  // `nranks` ranks as threads of this process, comms[r] for thread r
  // (weftCommInitInProcess). nullptr: the backend cannot.
  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> (*init_local)(int nranks,
                                                                          const CommOptions& options) = nullptr;
  // A communicator of the MPI_COMM_WORLD ranks `world_ranks`, rank i being
  // world_ranks[i], made by them alone (weftCommInitStore under an MPI
  // launcher); `tag` tells apart groups being made at once. nullptr: the
  // backend cannot.
  absl::StatusOr<std::unique_ptr<Communicator>> (*init_mpi_group)(const std::vector<int>& world_ranks, int tag,
                                                                  const CommOptions& options) = nullptr;
};

// Called from a static initializer in each backend.
bool RegisterBackend(const BackendFactory& factory);
// nullptr when the backend is not built.
const BackendFactory* FindBackend(Backend id);

// The world communicator of whatever launched this process
// (weftCommInitWorld: MPI, torchrun, Slurm, weft's variables, or one rank).
// kAuto picks NCCL for CUDA memory; for host memory MPI under an MPI
// launcher, UCX for the other launchers, the in-process backend alone.
absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(Backend backend, const CommOptions& options);

// A unique id whose bootstrap root runs in this process (weftGetUniqueId).
absl::StatusOr<bootstrap::UniqueId> MakeUniqueId();
// Rank `rank` of an `nranks` world through the root `id` names
// (weftCommInitRank). kAuto: NCCL for CUDA memory, UCX for host memory.
absl::StatusOr<std::unique_ptr<Communicator>> InitRank(Backend backend, int nranks, const bootstrap::UniqueId& id,
                                                       int rank, const CommOptions& options);

// A key-value store that moves the unique id (weftCommInitStore).
struct KeyValueStore {
  std::function<absl::Status(const std::string& key, const std::string& value)> set;
  std::function<absl::StatusOr<std::string>(const std::string& key, int timeout_ms)> get;
};
// store.set and store.get with errors that name this rank, the key and (for
// a get, which waits up to timeout_ms) what it waited for.
absl::Status SetIn(const KeyValueStore& store, int rank, const std::string& key, const std::string& value);
absl::StatusOr<std::string> GetFrom(const KeyValueStore& store, int rank, const std::string& key,
                                    const std::string& what, int timeout_ms);
// Rank `rank` of an `nranks` world whose ranks meet through `store`, under
// keys that begin with `prefix`. For host memory under an MPI launcher,
// kAuto and kMpi make an MPI communicator of the members' MPI_COMM_WORLD
// ranks, which they exchange through the store (store_mpi.cc); elsewhere,
// and with kUcx, rank 0 moves a unique id through it (InitRank).
absl::StatusOr<std::unique_ptr<Communicator>> InitStore(Backend backend, int nranks, int rank,
                                                        const KeyValueStore& store, const std::string& prefix,
                                                        const CommOptions& options);

}  // namespace weft

#endif  // WEFT_COMM_REGISTRY_H_
