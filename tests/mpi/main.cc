// gtest main for MPI-launched tests (mpiexec -n N test): every rank runs
// every test; rank 0 prints the usual report, other ranks print only their
// failures (prefixed with the rank); the exit code is the worst of all
// ranks (MPI_MAX), so a failure on any rank fails the run. Each test has a
// time limit (WEFT_TEST_LIMIT_S, default 120 s): a test still running then
// is reported and the whole job is aborted, so a hang fails instead of
// blocking CI.
#include <mpi.h>

#include "gtest/gtest.h"
#include "tests/common/rank_listeners.h"

namespace {

int WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = WorldRank();
  weft::testing::InstallRankListeners(rank, [] { MPI_Abort(MPI_COMM_WORLD, 3); });
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
