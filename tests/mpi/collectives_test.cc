// The conformance suite (tests/common/world_suite.cc) on the MPI backend, one
// rank per process (mpiexec -n 2 and -n 4; see meson.build), and on the UCX
// backend when WEFT_TEST_BACKEND=ucx (the same point-to-point schedules on
// another transport), plus what only an MPI launch has.
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
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
#include "tests/common/file_store.h"
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

int WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// A store of files in a directory that every rank of the job sees: rank 0
// makes it and MPI_COMM_WORLD hands its name to the others; it is removed
// once every rank is done with it.
class SharedStore {
 public:
  SharedStore() {
    char path[64] = "/tmp/weft-store-XXXXXX";
    if (WorldRank() == 0 && mkdtemp(path) == nullptr) path[0] = '\0';
    MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, MPI_COMM_WORLD);
    dir_ = path;
    store_ = FileStore(dir_);
  }
  ~SharedStore() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (WorldRank() == 0 && !dir_.empty()) std::filesystem::remove_all(dir_);
  }
  bool ok() const { return !dir_.empty(); }
  const KeyValueStore& store() const { return store_; }

 private:
  std::string dir_;
  KeyValueStore store_;
};

// weftCommInitStore under mpiexec: the store world's members agree on their
// MPI_COMM_WORLD ranks and make an MPI communicator of them, in store order,
// by themselves: here two groups at once, each rank's in reverse world order.
TEST(Mpi, StoreWorldsAreMpiCommunicatorsOfTheirMembers) {
  const SharedStore shared;
  ASSERT_TRUE(shared.ok());
  const KeyValueStore& store = shared.store();
  const int n = WorldSize(), me = WorldRank();
  // The whole world, in store order = world order.
  {
    auto comm = InitStore(Backend::kAuto, n, me, store, "world", CommOptions{});
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_EQ((*comm)->backend(), n > 1 ? Backend::kMpi : Backend::kInProcess);
    EXPECT_EQ((*comm)->rank(), me);
  }
  // Even and odd world ranks, each group made at the same time by its members
  // alone, with the highest world rank first.
  std::vector<int> members;
  for (int q = n - 1; q >= 0; --q) {
    if (q % 2 == me % 2) members.push_back(q);
  }
  const int m = static_cast<int>(members.size());
  const int at = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  auto comm = InitStore(Backend::kMpi, m, at, store, me % 2 == 0 ? "even" : "odd", CommOptions{});
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->backend(), Backend::kMpi);
  EXPECT_EQ((*comm)->size(), m);
  EXPECT_EQ((*comm)->rank(), at);
  std::vector<int32_t> got(static_cast<size_t>(m));
  const int32_t mine = me;
  ASSERT_TRUE((*comm)->AllGather(&mine, got.data(), 1, DataType::kInt32, nullptr).ok());
  EXPECT_EQ(got, std::vector<int32_t>(members.begin(), members.end()));
}

// A store world whose ranks are not one MPI job's (here rank 1 says it is of
// another job): weftBackendMpi fails on every rank naming why, and
// weftBackendAuto takes the unique id's path (UCX) on every rank.
TEST(Mpi, StoreWorldNotOfOneJobFallsBackOrFailsAlike) {
  const int n = WorldSize(), me = WorldRank();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  const SharedStore shared;
  ASSERT_TRUE(shared.ok());
  const KeyValueStore& store = shared.store();
  // Rank 1's job name, put back however the test ends.
  const char* job = std::getenv("PMIX_NAMESPACE");
  const std::optional<std::string> saved = job != nullptr ? std::optional<std::string>(job) : std::nullopt;
  const auto restore = absl::MakeCleanup([&] {
    if (me != 1) return;
    if (saved) setenv("PMIX_NAMESPACE", saved->c_str(), 1);
    else unsetenv("PMIX_NAMESPACE");
  });
  if (me == 1) setenv("PMIX_NAMESPACE", "another-job", 1);
  auto asked = InitStore(Backend::kMpi, n, me, store, "asked", CommOptions{});
  EXPECT_FALSE(asked.ok());
  EXPECT_EQ(asked.status().code(), absl::StatusCode::kFailedPrecondition) << asked.status();
  EXPECT_NE(asked.status().message().find("another-job"), std::string::npos) << asked.status();
  auto comm = InitStore(Backend::kAuto, n, me, store, "auto", CommOptions{});
  if (FindBackend(Backend::kUcx) != nullptr) {
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_EQ((*comm)->backend(), Backend::kUcx);
    float x = 1;
    ASSERT_TRUE((*comm)->AllReduce(&x, &x, 1, DataType::kFloat32, RedOp::kSum, nullptr).ok());
    EXPECT_EQ(x, static_cast<float>(n));
  } else {
    EXPECT_FALSE(comm.ok());  // without UCX a world outside MPI has no host backend
  }
}

}  // namespace
}  // namespace testing
}  // namespace weft
