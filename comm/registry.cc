#include "comm/registry.h"

#include <array>
#include <cstring>
#include <mutex>
#include <optional>

#include "comm/bootstrap/launch.h"
#include "comm/bootstrap/socket.h"
#include "comm/trace_clock.h"
#include "comm/fault.h"
#include "comm/store_mpi.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace {

struct Table {
  std::mutex mu;
  std::array<std::optional<BackendFactory>, kNumBackends> entries;
};
Table& GetTable() {
  static auto* t = new Table();
  return *t;
}

absl::StatusOr<const BackendFactory*> Find(Backend backend, const CommOptions& options) {
  const BackendFactory* f = FindBackend(backend);
  if (f == nullptr) {
    return Unsupported("backend %s is not built into this libweft (configure with -D%s=enabled and its "
                       "dependencies installed)", Name(backend), Name(backend));
  }
  if (f->memory != options.memory) {
    return InvalidArgument("config.memory = %s does not match backend %s, which works on %s memory",
                           Name(options.memory), Name(backend), Name(f->memory));
  }
  return f;
}

// kAuto for a world that a bootstrap forms: NCCL for CUDA memory; for host
// memory UCX, or in-process for a world of one rank (which needs no wire).
Backend AutoForBootstrap(const CommOptions& options, int nranks) {
  if (options.memory == MemKind::kCuda) return Backend::kNccl;
  return nranks == 1 ? Backend::kInProcess : Backend::kUcx;
}

absl::StatusOr<std::unique_ptr<Communicator>> FromBootstrap(Backend backend, bootstrap::Bootstrap& b,
                                                            const CommOptions& options) {
  if (backend == Backend::kUcx && FindBackend(Backend::kUcx) == nullptr && options.memory == MemKind::kHost) {
    return Unsupported("a host-memory world of %d ranks without MPI runs on the UCX backend, which this libweft "
                       "was built without (install libucx-dev and configure with -Ducx=enabled, or launch with "
                       "mpirun)", b.size());
  }
  ASSIGN_OR_RETURN(const BackendFactory* f, Find(backend, options));
  if (f->init_bootstrap == nullptr) {
    return InvalidArgument("backend %s makes its worlds from MPI_COMM_WORLD only (weftCommInitWorld under mpirun); "
                           "a world formed through %s takes weftBackendAuto or UCX for host memory",
                           Name(backend), b.Describe());
  }
  Log(LogLevel::kInfo, "init: rank %d of %d, backend %s, memory %s, bootstrap over %s", b.rank(), b.size(),
      Name(backend), Name(options.memory), b.Describe());
  return fault::AtInit(AlignTraceClock(f->init_bootstrap(b, options)));
}

}  // namespace

bool RegisterBackend(const BackendFactory& factory) {
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  t.entries[static_cast<int>(factory.id)] = factory;
  return true;
}

const BackendFactory* FindBackend(Backend id) {
  const int i = static_cast<int>(id);
  if (i < 0 || i >= kNumBackends) return nullptr;
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.entries[i] ? &*t.entries[i] : nullptr;
}

absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(Backend backend, const CommOptions& in) {
  const CommOptions options = ResolveOptions(in);
  RETURN_IF_ERROR(fault::CheckEnv());
  const bootstrap::MpiHooks* mpi = bootstrap::Mpi();
  ASSIGN_OR_RETURN(bootstrap::Launch launch, bootstrap::FindLaunch(mpi != nullptr));
  if (launch.kind == bootstrap::LaunchKind::kNone && mpi != nullptr && mpi->active()) {
    launch.kind = bootstrap::LaunchKind::kMpi;
    launch.why = "the application initialised MPI itself";
  }
  const bool under_mpi = launch.kind == bootstrap::LaunchKind::kMpi;
  if (backend == Backend::kAuto) {
    if (options.memory == MemKind::kCuda) {
      backend = Backend::kNccl;
    } else if (under_mpi) {
      backend = Backend::kMpi;
    } else {
      backend = AutoForBootstrap(options, launch.size);
    }
  }
  Log(LogLevel::kInfo, "init world: launcher %s (%s); backend %s, memory %s, timeout %d ms", Name(launch.kind),
      launch.why, Name(backend), Name(options.memory), options.timeout_ms);

  if (backend == Backend::kMpi) {
    ASSIGN_OR_RETURN(const BackendFactory* f, Find(backend, options));
    if (!under_mpi && launch.size > 1) {
      return InvalidArgument("backend MPI needs an MPI launcher, but this process was started by %s (%s): use "
                             "weftBackendAuto or UCX for host memory there", Name(launch.kind), launch.why);
    }
    return fault::AtInit(AlignTraceClock(f->init_mpi_world(options)));  // outside a launcher: MPI's singleton world
  }
  if (backend == Backend::kInProcess && launch.size > 1) {
    return InvalidArgument("the in-process backend makes one-rank worlds per process (weftCommInitInProcess for "
                           "several), but %s describes %d ranks", launch.why, launch.size);
  }
  std::unique_ptr<bootstrap::Bootstrap> b;
  if (under_mpi) {
    ASSIGN_OR_RETURN(b, mpi->world(options.bootstrap_timeout_ms));
  } else if (launch.kind == bootstrap::LaunchKind::kNone) {
    b = bootstrap::Self();
  } else {
    absl::StatusOr<std::unique_ptr<bootstrap::Bootstrap>> joined =
        bootstrap::JoinLaunchedWorld(launch, options.bootstrap_timeout_ms);
    if (!joined.ok()) return Annotate(joined.status(), launch.why);
    b = std::move(*joined);
  }
  return FromBootstrap(backend, *b, options);
}

absl::StatusOr<bootstrap::UniqueId> MakeUniqueId() { return bootstrap::MakeUniqueId(); }

absl::StatusOr<std::unique_ptr<Communicator>> InitRank(Backend backend, int nranks, const bootstrap::UniqueId& id,
                                                       int rank, const CommOptions& in) {
  const CommOptions options = ResolveOptions(in);
  RETURN_IF_ERROR(fault::CheckEnv());
  if (nranks < 1) return InvalidArgument("nranks = %d must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) return InvalidArgument("rank = %d is outside [0, nranks = %d)", rank, nranks);
  if (backend == Backend::kAuto) backend = AutoForBootstrap(options, nranks);
  if (backend == Backend::kMpi) {
    return InvalidArgument("backend MPI makes its worlds from MPI_COMM_WORLD (weftCommInitWorld under mpirun), "
                           "not from a unique id: use weftBackendAuto or UCX for host memory");
  }
  if (backend == Backend::kInProcess && nranks > 1) {
    return InvalidArgument("the in-process backend makes one-rank worlds per process, not one of nranks = %d "
                           "(weftCommInitInProcess makes several in one process)", nranks);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<bootstrap::Bootstrap> b,
                   bootstrap::JoinSocketWorld(id, nranks, rank, options.bootstrap_timeout_ms));
  return FromBootstrap(backend, *b, options);
}

absl::Status SetIn(const KeyValueStore& store, int rank, const std::string& key, const std::string& value) {
  const absl::Status s = store.set(key, value);
  return s.ok() ? s : Annotate(s, absl::StrFormat("rank %d setting '%s' in the store", rank, key));
}

absl::StatusOr<std::string> GetFrom(const KeyValueStore& store, int rank, const std::string& key,
                                    const std::string& what, int timeout_ms) {
  absl::StatusOr<std::string> v = store.get(key, timeout_ms);
  if (v.ok()) return v;
  return Annotate(v.status(), absl::StrFormat("rank %d waiting %d ms for %s at '%s' in the store", rank, timeout_ms,
                                              what, key));
}

absl::StatusOr<std::unique_ptr<Communicator>> InitStore(Backend backend, int nranks, int rank,
                                                        const KeyValueStore& store, const std::string& prefix,
                                                        const CommOptions& in) {
  const CommOptions options = ResolveOptions(in);
  if (nranks < 1) return InvalidArgument("nranks = %d must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) return InvalidArgument("rank = %d is outside [0, nranks = %d)", rank, nranks);
  // Host memory under mpirun: MPI, as weftCommInitWorld picks it there. A
  // libweft without MPI has nothing to agree on (every rank of a job runs
  // one build); a world of one rank needs no wire unless MPI is asked for.
  const bool mpi_asked = backend == Backend::kMpi;
  if (mpi_asked) RETURN_IF_ERROR(Find(Backend::kMpi, options).status());  // built, and for host memory
  if (options.memory == MemKind::kHost && (mpi_asked || (backend == Backend::kAuto && nranks > 1)) &&
      FindBackend(Backend::kMpi) != nullptr) {
    RETURN_IF_ERROR(fault::CheckEnv());
    absl::StatusOr<std::unique_ptr<Communicator>> comm = InitStoreMpi(mpi_asked, nranks, rank, store, prefix, options);
    // nullptr: not one MPI job's ranks, and every rank takes the unique id's path below.
    if (!comm.ok() || *comm != nullptr) return fault::AtInit(AlignTraceClock(std::move(comm)));
  }
  const std::string key = prefix + (prefix.empty() ? "" : "/") + "weft/unique_id";
  unsigned char bytes[bootstrap::kUniqueIdBytes];
  bootstrap::UniqueId id;
  if (rank == 0) {
    ASSIGN_OR_RETURN(id, MakeUniqueId());
    bootstrap::EncodeUniqueId(id, bytes);
    RETURN_IF_ERROR(SetIn(store, 0, key, std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes))));
  } else {
    ASSIGN_OR_RETURN(const std::string v,
                     GetFrom(store, rank, key, "rank 0's unique id", options.bootstrap_timeout_ms));
    if (v.size() != sizeof(bytes)) {
      return InvalidUsage("the store's '%s' holds %d bytes, not a weft unique id of %d: is that key used by "
                          "something else?", key, v.size(), sizeof(bytes));
    }
    std::memcpy(bytes, v.data(), sizeof(bytes));
    absl::StatusOr<bootstrap::UniqueId> got = bootstrap::DecodeUniqueId(bytes);
    if (!got.ok()) return Annotate(got.status(), absl::StrFormat("the store's '%s'", key));
    id = *got;
  }
  return InitRank(backend, nranks, id, rank, options);
}

}  // namespace weft
