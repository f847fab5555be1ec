// Which backends this build has, and how the world communicator is chosen.
//
// Each backend registers itself from its own comm/<backend>/comm.cc at load
// time, so whether a backend exists is decided only by its meson.build and
// shared code never tests HAVE_NCCL or HAVE_MPI.
#ifndef WEFT_COMM_REGISTRY_H_
#define WEFT_COMM_REGISTRY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace weft {

struct BackendFactory {
  Backend id;
  MemKind memory;  // the memory kind its collectives work on
  // True when this process was started by a launcher the backend can span
  // (mpirun, srun). nullptr: never.
  bool (*launched)();
  absl::StatusOr<std::unique_ptr<Communicator>> (*init_world)(const CommOptions& options);
  // `nranks` ranks as threads of this process, comms[r] for thread r
  // (weftCommInitInProcess). nullptr: the backend cannot.
  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> (*init_local)(int nranks,
                                                                          const CommOptions& options) = nullptr;
};

// Called from a static initializer in each backend.
bool RegisterBackend(const BackendFactory& factory);
// nullptr when the backend is not built.
const BackendFactory* FindBackend(Backend id);

// The world communicator. kAuto picks NCCL for CUDA memory, MPI for host
// memory under a launcher, else a one-rank in-process communicator.
absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(Backend backend, const CommOptions& options);

}  // namespace weft

#endif  // WEFT_COMM_REGISTRY_H_
