// Which launcher started this process, from its environment alone, and the
// world it describes: weftCommInitWorld's rendezvous (weft.h lists the
// order). Read at each call, not cached: a process may make several worlds,
// and tests set the variables themselves.
//
//   ASSIGN_OR_RETURN(Launch l, FindLaunch(MpiBootstrapBuilt()));
//   if (l.kind == LaunchKind::kTorchrun) ... JoinLaunchedWorld(l, timeout_ms)
#ifndef WEFT_COMM_BOOTSTRAP_LAUNCH_H_
#define WEFT_COMM_BOOTSTRAP_LAUNCH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/bootstrap/bootstrap.h"

namespace weft {
namespace bootstrap {

enum class LaunchKind { kNone, kMpi, kTorchrun, kSlurm, kWeft };
const char* Name(LaunchKind k);

struct Launch {
  LaunchKind kind = LaunchKind::kNone;
  int rank = 0;
  int size = 1;
  std::string root_host;  // torchrun, Slurm, weft: where rank 0 serves the bootstrap
  int root_port = 0;
  // torchrun's agent serves a TCPStore at MASTER_ADDR:MASTER_PORT: rank 0
  // serves the bootstrap at a port the kernel picks and publishes its unique
  // id there (root_host is the store's host, root_port 0).
  int torch_store_port = 0;
  std::string why;        // for WEFT_DEBUG=INFO and errors: the variables that decided
};

// True when an MPI launcher's own variables are set (mpirun/mpiexec of Open
// MPI, MPICH/hydra, MVAPICH, any PMI/PMIx launcher, srun --mpi=pmix). A
// plain srun step is Slurm's (SlurmStep). Never initialises MPI.
bool MpiLauncherVariables();
// A Slurm job step of several tasks (srun, not the batch script).
bool SlurmStep();

// The world the environment describes. `mpi_built`: whether this libweft
// has MPI; an MPI launcher then means kMpi, and without it an error (or
// Slurm's variables under srun). Variables that are present but unusable
// are an InvalidArgument naming them; kNone only when none is present.
absl::StatusOr<Launch> FindLaunch(bool mpi_built);

// The bootstrap of a kTorchrun, kSlurm or kWeft launch: rank 0 serves the
// root, every rank joins it. Each call in a process makes the next world
// (the job tag counts them), so every rank must make its worlds in the same
// order, as with any collective.
absl::StatusOr<std::unique_ptr<Bootstrap>> JoinLaunchedWorld(const Launch& l, int timeout_ms);

// MPI's part of the bootstrap, registered by mpi.cc when this libweft has
// MPI (so that nothing else tests whether it does).
struct MpiHooks {
  // MPI is initialised (by weft or the application) and not finalised.
  bool (*active)();
  // MPI_COMM_WORLD as a Bootstrap (initialising MPI if nobody has).
  absl::StatusOr<std::unique_ptr<Bootstrap>> (*world)(int timeout_ms);
};
bool RegisterMpi(const MpiHooks& hooks);
const MpiHooks* Mpi();  // nullptr without MPI

// Slurm's compressed host list ("gpu[01-04,07],cpu3") -> its first name.
absl::StatusOr<std::string> FirstHost(const std::string& nodelist);

}  // namespace bootstrap
}  // namespace weft

#endif  // WEFT_COMM_BOOTSTRAP_LAUNCH_H_
