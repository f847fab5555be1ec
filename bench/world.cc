#include "bench/world.h"

#include <memory>
#include <thread>
#include <vector>

#include "comm/bootstrap/launch.h"
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
  return InvalidArgument("--backend: '%s' is not one of mpi, ucx (the host backend of a launched job; a job that "
                         "torchrun, srun or WEFT_RANK launched runs on ucx)", name);
}

absl::Status RunOnWorld(int inprocess_ranks, int timeout_ms, const std::function<void(Communicator&)>& body,
                        Backend launched) {
  CommOptions o;
  o.timeout_ms = timeout_ms;
  const bootstrap::MpiHooks* mpi = bootstrap::Mpi();
  ASSIGN_OR_RETURN(const bootstrap::Launch launch, bootstrap::FindLaunch(mpi != nullptr));
  if (launch.kind != bootstrap::LaunchKind::kNone) {
    // Without MPI's launcher a world is UCX's (--backend mpi is the default).
    if (launch.kind != bootstrap::LaunchKind::kMpi && launched == Backend::kMpi) launched = Backend::kUcx;
    ASSIGN_OR_RETURN(auto world, InitWorld(launched, o));
    body(*world);
    return absl::OkStatus();
  }
  if (launched != Backend::kMpi) {
    return InvalidArgument("--backend %s runs the ranks of a launched job (mpirun, torchrun, srun, WEFT_RANK); "
                           "without a launcher the bench runs in-process ranks", Name(launched));
  }
  ASSIGN_OR_RETURN(auto comms, inproc::InitInProcess(inprocess_ranks, o));
  std::vector<std::thread> threads;
  for (auto& c : comms) threads.emplace_back([&body, comm = c.get()] { body(*comm); });
  for (auto& t : threads) t.join();
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace weft
