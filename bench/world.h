// What the host benchmarks share: where a tensor list lives, and running a
// body on every rank of a world: the job's when launched by mpirun/srun
// (over MPI, or UCX with --backend ucx), else N in-process ranks as threads.
#ifndef WEFT_BENCH_WORLD_H_
#define WEFT_BENCH_WORLD_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace weft {
namespace bench {

// bench/data/<list>.tensors, or `list` itself when it is a path.
std::string TensorListPath(const std::string& list);

// "mpi" or "ucx": the backend a launched job runs on (--backend).
absl::StatusOr<Backend> LaunchedBackend(const std::string& name);

// Runs body(comm) on each rank; returns when every rank is done.
// `launched`: the backend under mpirun/srun (kMpi or kUcx).
absl::Status RunOnWorld(int inprocess_ranks, int timeout_ms, const std::function<void(Communicator&)>& body,
                        Backend launched = Backend::kMpi);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_BENCH_WORLD_H_
