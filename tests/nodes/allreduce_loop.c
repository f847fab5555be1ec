/* All-reduces in a loop across nodes until one fails, through the C ABI
 * alone; started on every rank by tests/nodes/cluster.py, which cuts a
 * node's link or kills a node while the loop runs.
 *
 *   allreduce_loop [COUNT [SECONDS]]
 *
 * Each call sums COUNT floats (default 262144, 1 MiB) and every element is
 * checked. The rank exits 0 only when, after at least one good call, a call
 * returned an error (printed with weftGetLastError's text and how long the
 * failing call took), and the communicator was then aborted and destroyed.
 * It exits 1 when a sum is wrong, when no call ever succeeded, or when the
 * loop ran SECONDS (default 120) without any error: a fault nobody saw. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <weft/weft.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
  const size_t count = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 262144;
  const double limit_ms = (argc > 2 ? atof(argv[2]) : 120.0) * 1e3;
  const char* r_env = getenv("WEFT_TEST_RANK");
  const int test_rank = r_env != NULL ? atoi(r_env) : -1;
  const double start = now_ms();
  weftComm_t comm;
  weftResult_t r = weftCommInitWorld(&comm, NULL);
  if (r != weftSuccess) {
    fprintf(stderr, "[rank %d] weftCommInitWorld: %s: %s\n", test_rank, weftGetErrorString(r), weftGetLastError());
    return 1;
  }
  int rank = -1, np = 0;
  weftCommUserRank(comm, &rank);
  weftCommCount(comm, &np);
  float* buf = malloc(count * sizeof(float));
  if (count == 0 || buf == NULL) return 1;
  long good = 0;
  double call_start = 0;
  for (;;) {
    /* Element i of rank q is (q + 1) * (i % 7 + 1): the sum is exact in float. */
    for (size_t i = 0; i < count; ++i) buf[i] = (float)((rank + 1) * (int)(i % 7 + 1));
    call_start = now_ms();
    r = weftAllReduce(buf, buf, count, weftFloat32, weftSum, comm, NULL);
    if (r != weftSuccess) break;
    const int ranks_sum = np * (np + 1) / 2;
    for (size_t i = 0; i < count; ++i) {
      if (buf[i] != (float)(ranks_sum * (int)(i % 7 + 1))) {
        fprintf(stderr, "[rank %d] call %ld: element %zu is %g, not %d\n", rank, good, i, (double)buf[i],
                ranks_sum * (int)(i % 7 + 1));
        return 1;
      }
    }
    ++good;
    if (now_ms() - start > limit_ms) {
      fprintf(stderr, "[rank %d] %ld all-reduces in %.0f s and none failed\n", rank, good, limit_ms / 1e3);
      return 1;
    }
  }
  const double failed_at = now_ms();
  /* Copied now: the calls below may set a new last error. */
  char message[1024];
  snprintf(message, sizeof(message), "%s", weftGetLastError());
  printf("[rank %d] all-reduce %ld failed after %.0f ms in the call (%.1f s into the run): %s: %s\n", rank, good,
         failed_at - call_start, (failed_at - start) / 1e3, weftGetErrorString(r), message);
  fflush(stdout);
  weftResult_t a = weftCommAbort(comm);
  weftResult_t d = weftCommDestroy(comm);
  free(buf);
  if (a != weftSuccess || d != weftSuccess) {
    fprintf(stderr, "[rank %d] abort: %s, destroy: %s: %s\n", rank, weftGetErrorString(a), weftGetErrorString(d),
            weftGetLastError());
    return 1;
  }
  printf("[rank %d] destroyed %.0f ms after the failure\n", rank, now_ms() - failed_at);
  if (good == 0) {
    fprintf(stderr, "[rank %d] no all-reduce succeeded before the failure: the fault came too early\n", rank);
    return 1;
  }
  return 0;
}
