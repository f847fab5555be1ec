/* Who initialises and finalises MPI (weft.h, weftCommInitWorld). Run under
 * mpiexec with one mode:
 *   weft-owns       the program never calls MPI: weft initialises MPI and must
 *                   finalise it at exit (else mpiexec fails the job);
 *   app-owns        the program initialises MPI: weft must leave it
 *                   initialised after weftCommDestroy, the program finalises;
 *   after-finalize  the program finalised MPI already: weftCommInitWorld must
 *                   fail with weftInvalidUsage saying so, not crash.
 * Plain C: it also shows weft.h is usable from C with MPI. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "weft/weft.h"

static int fail(const char* what) {
  fprintf(stderr, "lifecycle: %s (last error: %s)\n", what, weftGetLastError());
  return 1;
}

static int all_reduce_once(weftComm_t comm) {
  int n = 0;
  float x = 1.0f;
  weftCommCount(comm, &n);
  if (weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, NULL) != weftSuccess) return fail("all-reduce failed");
  if (x != (float)n) return fail("all-reduce gave a wrong sum");
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  weftComm_t comm = NULL;
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  int flag = 0;
  weftBackend_t backend = weftBackendAuto;
  if (strcmp(mode, "weft-owns") == 0) {
    if (weftCommInitWorld(&comm, &cfg) != weftSuccess) return fail("init failed");
    if (weftCommGetBackend(comm, &backend) != weftSuccess || backend != weftBackendMpi) {
      return fail("auto did not pick MPI");
    }
    if (all_reduce_once(comm)) return 1;
    MPI_Initialized(&flag);
    if (!flag) return fail("MPI is not initialised after weftCommInitWorld");
    weftCommDestroy(comm);
    return 0; /* weft's atexit handler finalises MPI */
  }
  if (strcmp(mode, "app-owns") == 0) {
    MPI_Init(&argc, &argv);
    if (weftCommInitWorld(&comm, &cfg) != weftSuccess) return fail("init failed");
    if (all_reduce_once(comm)) return 1;
    weftCommDestroy(comm);
    MPI_Finalized(&flag);
    if (flag) return fail("weft finalised the application's MPI");
    MPI_Finalize();
    return 0;
  }
  if (strcmp(mode, "after-finalize") == 0) {
    MPI_Init(&argc, &argv);
    MPI_Finalize();
    cfg.backend = weftBackendMpi;
    if (weftCommInitWorld(&comm, &cfg) != weftInvalidUsage) {
      return fail("init after MPI_Finalize did not fail with weftInvalidUsage");
    }
    if (strstr(weftGetLastError(), "finalized") == NULL) return fail("the error does not say MPI was finalized");
    return 0;
  }
  fprintf(stderr, "usage: lifecycle weft-owns|app-owns|after-finalize\n");
  return 2;
}
