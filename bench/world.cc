#include "bench/world.h"

#include <memory>
#include <thread>
#include <vector>

#include "comm/inproc/comm.h"
#include "comm/registry.h"
#include "core/status.h"

namespace weft {
namespace bench {

std::string TensorListPath(const std::string& list) {
  return list.find('/') != std::string::npos ? list : std::string(WEFT_BENCH_DATA_DIR) + "/" + list + ".tensors";
}

absl::StatusOr<Backend> LaunchedBackend(const std::string& name) {
  if (name == "mpi") return Backend::kMpi;
  if (name == "ucx") return Backend::kUcx;
  return InvalidArgument("--backend: '%s' is not one of mpi, ucx (the backend of a job mpirun/srun launched)", name);
}

absl::Status RunOnWorld(int inprocess_ranks, int timeout_ms, const std::function<void(Communicator&)>& body,
                        Backend launched) {
  CommOptions o;
  o.timeout_ms = timeout_ms;
  const BackendFactory* mpi = FindBackend(Backend::kMpi);
  if (mpi != nullptr && mpi->launched != nullptr && mpi->launched()) {
    ASSIGN_OR_RETURN(auto world, InitWorld(launched, o));
    body(*world);
    return absl::OkStatus();
  }
  if (launched != Backend::kMpi) {
    return InvalidArgument("--backend %s runs the ranks of a job launched by mpirun/srun; without a launcher the "
                           "bench runs in-process ranks", Name(launched));
  }
  ASSIGN_OR_RETURN(auto comms, inproc::InitInProcess(inprocess_ranks, o));
  std::vector<std::thread> threads;
  for (auto& c : comms) threads.emplace_back([&body, comm = c.get()] { body(*comm); });
  for (auto& t : threads) t.join();
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace weft
