// The conformance suite (tests/common/world_suite.cc) on the MPI backend, one
// rank per process (mpiexec -n 2 and -n 4; see meson.build), and on the UCX
// backend when WEFT_TEST_BACKEND=ucx (the same point-to-point schedules on
// another transport), plus what only an MPI launch has.
#include <mpi.h>

#include <cstdlib>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/bootstrap/launch.h"
#include "comm/bootstrap/mpi_runtime.h"
#include "comm/mpi/comm.h"
#include "comm/p2p/comm.h"
#include "comm/registry.h"
#include "shard/reducer.h"
#include "gtest/gtest.h"
#include "tests/common/collective_check.h"
#include "tests/common/conformance.h"
#include "tests/common/world_suite.h"

namespace weft {
namespace testing {

// The backend under test: MPI, or UCX with WEFT_TEST_BACKEND=ucx.
Backend TestBackend() {
  const char* b = std::getenv("WEFT_TEST_BACKEND");
  return b != nullptr && std::string(b) == "ucx" ? Backend::kUcx : Backend::kMpi;
}

// A fresh communicator of the backend under test over every process, per test.
std::unique_ptr<Communicator> TestWorld(const CommOptions& options) {
  auto comm = InitWorld(TestBackend(), options);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? std::move(*comm) : nullptr;
}

namespace {

int WorldSize() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}


TEST(Mpi, AutoPicksMpiUnderMpiexec) {
  auto comm = InitWorld(Backend::kAuto, CommOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->backend(), Backend::kMpi);
  EXPECT_EQ((*comm)->size(), WorldSize());
}

// Launched() judges from the environment alone; each launcher's variables,
// set and cleared here (and restored), flip it.
TEST(Mpi, LaunchedReadsTheLaunchersEnvironment) {
  EXPECT_TRUE(bootstrap::MpiLauncherVariables());  // we run under mpiexec
  const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
                        "MV2_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* v : vars) {
    if (const char* x = std::getenv(v)) saved.emplace_back(v, x);
    unsetenv(v);
  }
  EXPECT_FALSE(bootstrap::MpiLauncherVariables());
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);  // an sbatch script, not a task of srun
  EXPECT_FALSE(bootstrap::MpiLauncherVariables());
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);  // a plain srun step: Slurm's, not MPI's
  EXPECT_FALSE(bootstrap::MpiLauncherVariables());
  EXPECT_TRUE(bootstrap::SlurmStep());
  unsetenv("SLURM_PROCID");
  unsetenv("SLURM_NTASKS");
  unsetenv("SLURM_STEP_NUM_TASKS");
  setenv("PMI_SIZE", "2", 1);  // MPICH's hydra
  EXPECT_TRUE(bootstrap::MpiLauncherVariables());
  unsetenv("PMI_SIZE");
  for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
  EXPECT_TRUE(bootstrap::MpiLauncherVariables());
}

}  // namespace
}  // namespace testing
}  // namespace weft
