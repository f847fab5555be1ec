// What the host benchmarks share: where a tensor list lives, and running a
// body on every rank of a world, MPI's when launched by mpirun/srun, else N
// in-process ranks as threads.
#ifndef WEFT_BENCH_WORLD_H_
#define WEFT_BENCH_WORLD_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace weft {
namespace bench {

// bench/data/<list>.tensors, or `list` itself when it is a path.
std::string TensorListPath(const std::string& list);

// Runs body(comm) on each rank; returns when every rank is done.
absl::Status RunOnWorld(int inprocess_ranks, int timeout_ms, const std::function<void(Communicator&)>& body);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_BENCH_WORLD_H_
