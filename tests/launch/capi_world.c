/* The three ways to make a world without MPI, through the C ABI alone, and
 * the ways forming one fails. One process per rank, started by launch.py.
 *
 *   capi_world worlds    weftCommInitWorld from the launcher's variables,
 *                        weftCommInitRank from a unique id moved through a
 *                        file, weftCommInitStore over a store of files: each
 *                        world spans the launch and sums every rank
 *   capi_world missing   the last rank never joins: the others time out,
 *                        naming it
 *   capi_world dup       the last rank claims rank 0: every rank fails
 *   capi_world nranks    rank 1 says nranks + 1: every rank fails
 *   capi_world killed    rank 1 is killed (launch.py --kill 1@1) while the
 *                        world waits for the late last rank: every survivor
 *                        fails, the waiting ones naming rank 1
 * In the failure modes every surviving rank must fail within its timeout
 * and leave no thread behind; it prints the error and exits 0 when so. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <weft/weft.h>

static int g_rank, g_np;
static const char* g_dir;

static void nap(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static int fail(const char* what, weftResult_t r) {
  fprintf(stderr, "[rank %d] %s: %s: %s\n", g_rank, what, weftGetErrorString(r), weftGetLastError());
  return 1;
}

/* The store: a file per key in the launch's scratch directory. */
static void key_path(const char* key, char* out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "%s/", g_dir);
  for (const char* k = key; *k && n + 1 < cap; ++k) out[n++] = *k == '/' ? '_' : *k;
  out[n] = '\0';
}

static int file_set(void* ctx, const char* key, const void* value, size_t len) {
  (void)ctx;
  char path[512], tmp[600];
  key_path(key, path, sizeof(path));
  snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
  FILE* f = fopen(tmp, "wb");
  if (f == NULL) return 1;
  const int ok = fwrite(value, 1, len, f) == len;
  if (fclose(f) != 0 || !ok) return 1;
  return rename(tmp, path) != 0;
}

static int file_get(void* ctx, const char* key, void* value, size_t cap, size_t* len, int timeout_ms) {
  (void)ctx;
  char path[512];
  key_path(key, path, sizeof(path));
  for (int waited = 0; timeout_ms < 0 || waited <= timeout_ms; waited += 5) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      *len = fread(value, 1, cap, f);
      const int more = fgetc(f) != EOF;
      fclose(f);
      return more;  /* a value longer than cap is an error */
    }
    nap(5);
  }
  return 1;
}

/* Rank 0's unique id to every rank, through the same files. */
static weftResult_t share_id(const char* key, weftUniqueId* id) {
  if (g_rank == 0) {
    weftResult_t r = weftGetUniqueId(id);
    if (r != weftSuccess) return r;
    return file_set(NULL, key, id, sizeof(*id)) == 0 ? weftSuccess : weftSystemError;
  }
  size_t len = 0;
  if (file_get(NULL, key, id, sizeof(*id), &len, 60000) != 0 || len != sizeof(*id)) return weftSystemError;
  return weftSuccess;
}

static int threads(void) {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  while (d != NULL && (e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  if (d != NULL) closedir(d);
  return n;
}

/* The world spans the launch, and every rank's sum of ranks is exact. */
static int check_world(weftComm_t comm, const char* how) {
  int n = 0, r = -1;
  weftCommCount(comm, &n);
  weftCommUserRank(comm, &r);
  if (n != g_np || r != g_rank) {
    fprintf(stderr, "[rank %d] %s: a world of %d ranks with this rank as %d\n", g_rank, how, n, r);
    return 1;
  }
  double x[3] = {g_rank, 1.0, -2.0 * g_rank};
  weftResult_t res = weftAllReduce(x, x, 3, weftFloat64, weftSum, comm, NULL);
  if (res != weftSuccess) return fail(how, res);
  const double s = g_np * (g_np - 1) / 2.0;
  if (x[0] != s || x[1] != g_np || x[2] != -2 * s) {
    fprintf(stderr, "[rank %d] %s: sums %g %g %g\n", g_rank, how, x[0], x[1], x[2]);
    return 1;
  }
  weftBackend_t b;
  weftCommGetBackend(comm, &b);
  if (g_np > 1 && b != weftBackendUcx) {
    fprintf(stderr, "[rank %d] %s: backend %d, not UCX\n", g_rank, how, (int)b);
    return 1;
  }
  return weftCommDestroy(comm) == weftSuccess ? 0 : fail("weftCommDestroy", weftInternalError);
}

static int worlds(void) {
  weftComm_t comm;
  weftResult_t r = weftCommInitWorld(&comm, NULL);
  if (r != weftSuccess) return fail("weftCommInitWorld", r);
  if (check_world(comm, "weftCommInitWorld")) return 1;

  weftUniqueId id;
  if ((r = share_id("uid", &id)) != weftSuccess) return fail("sharing the unique id", r);
  if ((r = weftCommInitRank(&comm, g_np, id, g_rank, NULL)) != weftSuccess) return fail("weftCommInitRank", r);
  if (check_world(comm, "weftCommInitRank")) return 1;

  weftStore_t store = WEFT_STORE_INITIALIZER;
  store.set = file_set;
  store.get = file_get;
  if ((r = weftCommInitStore(&comm, g_np, g_rank, &store, "job/pg0", NULL)) != weftSuccess) {
    return fail("weftCommInitStore", r);
  }
  if (check_world(comm, "weftCommInitStore")) return 1;
  /* The arguments a careless caller gets wrong, refused by name. */
  if (weftCommInitStore(&comm, g_np, g_np, &store, "x", NULL) != weftInvalidArgument) return 1;
  store.get = NULL;
  if (weftCommInitStore(&comm, g_np, g_rank, &store, "x", NULL) != weftInvalidArgument ||
      strstr(weftGetLastError(), "store->get") == NULL) {
    return fail("a store without get", weftInternalError);
  }
  memset(&id, 0, sizeof(id));
  if (weftCommInitRank(&comm, g_np, id, g_rank, NULL) != weftInvalidArgument) return 1;
  printf("[rank %d] three worlds of %d ranks without MPI\n", g_rank, g_np);
  return 0;
}

/* The failure modes: every rank that takes part must fail. */
static int failing(const char* mode) {
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.bootstrap_timeout_ms = 3000;
  int nranks = g_np, rank = g_rank;
  const int last = g_np - 1;
  if (strcmp(mode, "missing") == 0 && g_rank == last) return 0;
  if (strcmp(mode, "dup") == 0 && g_rank == last) rank = 0;
  if (strcmp(mode, "nranks") == 0 && g_rank == 1) nranks = g_np + 1;
  if (strcmp(mode, "killed") == 0 && g_rank == last) nap(2000);  /* late: rank 1 dies first */
  weftUniqueId id;
  weftResult_t r = share_id("uid", &id);
  if (r != weftSuccess) return fail("sharing the unique id", r);
  const int before = threads();
  const time_t t0 = time(NULL);
  weftComm_t comm = NULL;
  r = weftCommInitRank(&comm, nranks, id, rank, &cfg);
  const char* msg = weftGetLastError();
  if (r == weftSuccess) {
    fprintf(stderr, "[rank %d] %s: the world formed, but it must not\n", g_rank, mode);
    return 1;
  }
  if (time(NULL) - t0 > 20) {
    fprintf(stderr, "[rank %d] %s: the failure took %d s\n", g_rank, mode, (int)(time(NULL) - t0));
    return 1;
  }
  if (strcmp(mode, "missing") == 0 && (r != weftTimeout || strstr(msg, "missing rank(s)") == NULL)) {
    return fail("a missing rank", r);
  }
  if (strcmp(mode, "killed") == 0 && g_rank != last &&
      (r != weftRemoteError || strstr(msg, "rank 1 (from") == NULL)) {
    return fail("a killed rank", r);
  }
  if (threads() > before) {
    char names[512] = "";
    DIR* d = opendir("/proc/self/task");
    struct dirent* e;
    while (d != NULL && (e = readdir(d)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char path[300], name[64] = "";
      snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
      FILE* f = fopen(path, "r");
      if (f != NULL) {
        if (fgets(name, sizeof(name), f) == NULL) name[0] = '\0';
        fclose(f);
      }
      strncat(names, name, sizeof(names) - strlen(names) - 1);
    }
    if (d != NULL) closedir(d);
    fprintf(stderr, "[rank %d] %s: %d threads after the failed init, %d before: %s\n", g_rank, mode, threads(),
            before, names);
    return 1;
  }
  printf("[rank %d] %s: %s: %s\n", g_rank, mode, weftGetErrorString(r), msg);
  return 0;
}

int main(int argc, char** argv) {
  const char* r = getenv("WEFT_TEST_RANK");
  const char* n = getenv("WEFT_TEST_NP");
  g_dir = getenv("WEFT_TEST_DIR");
  if (argc != 2 || r == NULL || n == NULL || g_dir == NULL) {
    fprintf(stderr, "usage: launch.py --np N -- capi_world worlds|missing|dup|nranks|killed\n");
    return 2;
  }
  g_rank = atoi(r);
  g_np = atoi(n);
  return strcmp(argv[1], "worlds") == 0 ? worlds() : failing(argv[1]);
}
