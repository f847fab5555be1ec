/* The reducer's C ABI from C99: frozen struct layout, the initializer's
 * defaults, a two-rank reducer driven from two threads, and refused calls
 * that name what was wrong. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "weft/weft.h"

/* Appending fields is allowed; moving one breaks every compiled caller. */
typedef char check_size[sizeof(weftReducerConfig_t) == 56 ? 1 : -1];
typedef char check_names[offsetof(weftReducerConfig_t, names) == 48 ? 1 : -1];
typedef char check_view[offsetof(weftReducerConfig_t, gradient_as_bucket_view) == 40 ? 1 : -1];

static int failures = 0;
#define EXPECT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

enum { kGrads = 3 };
static const size_t kCounts[kGrads] = {5, 1000, 33};
static const char* const kNames[kGrads] = {"fc1.weight", "fc1.bias", "fc2.weight"};
static weftComm_t comms[2];

static void* rank_main(void* arg) {
  const int rank = (int)(size_t)arg;
  static float grads[2][kGrads][1000];
  weftTensor_t specs[kGrads];
  weftReducerConfig_t cfg = WEFT_REDUCER_CONFIG_INITIALIZER;
  weftReducer_t red = NULL;
  int g, step;
  size_t j;
  cfg.bucket_cap_bytes = 1024;
  cfg.first_bucket_cap_bytes = 64;
  cfg.names = kNames;
  for (g = 0; g < kGrads; ++g) {
    specs[g].data = NULL;
    specs[g].count = kCounts[g];
    specs[g].dtype = weftFloat32;
  }
  EXPECT(weftReducerCreate(comms[rank], specs, kGrads, &cfg, &red) == weftSuccess);
  for (step = 0; step < 3; ++step) {
    for (g = 0; g < kGrads; ++g) {
      for (j = 0; j < kCounts[g]; ++j) grads[rank][g][j] = (float)((int)((j + g + step + 3 * rank) % 9) - 4);
    }
    /* Opposite orders on the two ranks: buckets still launch in bucket order. */
    for (g = 0; g < kGrads; ++g) {
      const int i = rank == 0 ? g : kGrads - 1 - g;
      EXPECT(weftReducerMarkReady(red, i, grads[rank][i], NULL) == weftSuccess);
    }
    EXPECT(weftReducerFinalize(red, NULL) == weftSuccess);
    for (g = 0; g < kGrads; ++g) {
      for (j = 0; j < kCounts[g]; ++j) {
        const float a = (float)((int)((j + g + step) % 9) - 4), b = (float)((int)((j + g + step + 3) % 9) - 4);
        EXPECT(grads[rank][g][j] == (a + b) / 2);
      }
    }
  }
  /* Refused calls name the gradient; the backward can still be finished. */
  EXPECT(weftReducerMarkReady(red, 1, grads[rank][1], NULL) == weftSuccess);
  EXPECT(weftReducerMarkReady(red, 1, grads[rank][1], NULL) == weftInvalidUsage);
  EXPECT(strstr(weftGetLastError(), "'fc1.bias'") != NULL);
  EXPECT(weftReducerFinalize(red, NULL) == weftInvalidUsage);
  EXPECT(strstr(weftGetLastError(), "'fc1.weight', 'fc2.weight'") != NULL);
  EXPECT(weftReducerMarkReady(red, 0, grads[rank][0], NULL) == weftSuccess);
  EXPECT(weftReducerMarkReady(red, 2, grads[rank][2], NULL) == weftSuccess);
  EXPECT(weftReducerFinalize(red, NULL) == weftSuccess);
  EXPECT(weftReducerDestroy(red) == weftSuccess);
  return NULL;
}

int main(void) {
  weftReducerConfig_t cfg = WEFT_REDUCER_CONFIG_INITIALIZER;
  weftConfig_t ccfg = WEFT_CONFIG_INITIALIZER;
  weftTensor_t one = {NULL, 4, weftFloat32};
  weftReducer_t red = NULL;
  pthread_t threads[2];
  int r, n = 0;
  void* slot = NULL;

  EXPECT(cfg.size == sizeof(weftReducerConfig_t));
  EXPECT(cfg.bucket_cap_bytes == (size_t)25 << 20 && cfg.first_bucket_cap_bytes == (size_t)1 << 20);
  EXPECT(cfg.comm_dtype == WEFT_REDUCER_COMM_DTYPE_NATIVE && cfg.rebuild_buckets == 1 && cfg.find_unused == 0);

  ccfg.timeout_ms = 20000;
  EXPECT(weftCommInitInProcess(comms, 2, &ccfg) == weftSuccess);
  for (r = 0; r < 2; ++r) pthread_create(&threads[r], NULL, rank_main, (void*)(size_t)r);
  for (r = 0; r < 2; ++r) pthread_join(threads[r], NULL);

  /* Bad arguments on a one-rank world: refused with the value named. */
  {
    weftComm_t solo;
    EXPECT(weftCommInitInProcess(&solo, 1, NULL) == weftSuccess);
    cfg.comm_dtype = weftInt32;
    EXPECT(weftReducerCreate(solo, &one, 1, &cfg, &red) == weftInvalidArgument);
    EXPECT(strstr(weftGetLastError(), "comm_dtype = 6") != NULL);
    cfg.comm_dtype = WEFT_REDUCER_COMM_DTYPE_NATIVE;
    cfg.size = 0;
    EXPECT(weftReducerCreate(solo, &one, 1, &cfg, &red) == weftInvalidArgument);
    cfg.size = sizeof(cfg);
    EXPECT(weftReducerCreate(solo, &one, -1, &cfg, &red) == weftInvalidArgument);
    EXPECT(weftReducerCreate(solo, &one, 1, NULL, &red) == weftSuccess);
    EXPECT(weftReducerGetBucketCount(red, &n) == weftSuccess && n == 1);
    EXPECT(weftReducerGetGradSlot(red, 0, &slot, NULL) == weftSuccess && slot != NULL);
    EXPECT(weftReducerMarkReady(red, 7, slot, NULL) == weftInvalidArgument);
    EXPECT(strstr(weftGetLastError(), "index = 7") != NULL);
    EXPECT(weftReducerMarkReady(red, 0, NULL, NULL) == weftInvalidArgument);
    EXPECT(weftReducerDestroy(red) == weftSuccess);
    EXPECT(weftReducerDestroy(red) == weftInvalidArgument); /* no longer live */
    EXPECT(weftReducerFinalize(NULL, NULL) == weftInvalidArgument);
    EXPECT(weftCommDestroy(solo) == weftSuccess);
  }
  for (r = 0; r < 2; ++r) EXPECT(weftCommDestroy(comms[r]) == weftSuccess);
  if (failures == 0) printf("reducer ABI: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
