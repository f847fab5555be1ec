/* Tagged point-to-point through the C ABI from C99: three in-process ranks,
 * one thread each, send to the next rank on several tags and take the
 * messages in another order, alone, inside a group with the receives first,
 * and on a host stream; rank 0 receives from any source, blocking and on a
 * stream, and learns each sender; bad tags are refused naming the tag, and
 * the thread's last error is the failing call's. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "weft/weft.h"

typedef char check_tag_max[WEFT_TAG_MAX == 32767 ? 1 : -1];

static int failures = 0;
static pthread_mutex_t failures_mu = PTHREAD_MUTEX_INITIALIZER;
#define EXPECT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) {                                                       \
      pthread_mutex_lock(&failures_mu);                                  \
      fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
      pthread_mutex_unlock(&failures_mu);                                \
    }                                                                    \
  } while (0)

enum { kRanks = 3, kCount = 50000 };
static weftComm_t comms[kRanks];

/* What `from` sends on `tag`: every element names the two. */
static void fill(int* buf, int from, int tag) {
  int i;
  for (i = 0; i < kCount; ++i) buf[i] = from * 1000000 + tag * 1000 + i % 1000;
}

static int holds(const int* buf, int from, int tag) {
  int i;
  for (i = 0; i < kCount; ++i) {
    if (buf[i] != from * 1000000 + tag * 1000 + i % 1000) return 0;
  }
  return 1;
}

/* Every rank sends to rank 0 on tags 40 and 41; rank 0 takes tag 41 from
 * any source blocking, then tag 40 from any source on a stream. */
static void any_source(int rank) {
  static int out[kRanks][2][kCount], in[2][kRanks][kCount];
  weftComm_t c = comms[rank];
  weftStream_t s = NULL;
  int sources[2][kRanks], seen[2][kRanks], k, i, q;
  for (k = 0; k < 2; ++k) {
    fill(out[rank][k], rank, 40 + k);
    EXPECT(weftSendTagged(out[rank][k], kCount, weftInt32, 0, 40 + k, c, NULL) == weftSuccess);
  }
  if (rank != 0) return;
  for (i = 0; i < kRanks; ++i) {
    EXPECT(weftRecvAnySource(in[1][i], kCount, weftInt32, 41, &sources[1][i], c, NULL) == weftSuccess);
  }
  EXPECT(weftStreamCreate(&s) == weftSuccess);
  for (i = 0; i < kRanks; ++i) {
    EXPECT(weftRecvAnySource(in[0][i], kCount, weftInt32, 40, &sources[0][i], c, s) == weftSuccess);
  }
  EXPECT(weftStreamSynchronize(s) == weftSuccess);
  EXPECT(weftStreamDestroy(s) == weftSuccess);
  memset(seen, 0, sizeof(seen));
  for (k = 0; k < 2; ++k) {
    for (i = 0; i < kRanks; ++i) {
      q = sources[k][i];
      EXPECT(q >= 0 && q < kRanks);
      if (q < 0 || q >= kRanks) continue;
      ++seen[k][q];
      EXPECT(holds(in[k][i], q, 40 + k));
    }
    for (q = 0; q < kRanks; ++q) EXPECT(seen[k][q] == 1);
  }
  q = 5;
  EXPECT(weftRecvAnySource(in[0][0], 4, weftInt32, -2, &q, c, NULL) == weftInvalidArgument);
  EXPECT(strstr(weftGetLastError(), "weftRecvAnySource") != NULL && strstr(weftGetLastError(), "tag = -2") != NULL);
  EXPECT(q == 5); /* a refused call changes nothing */
  EXPECT(weftRecvAnySource(NULL, 0, weftInt32, 40, &q, c, NULL) == weftSuccess && q == -1);
}

static void* rank_main(void* arg) {
  const int rank = (int)(size_t)arg, next = (rank + 1) % kRanks, prev = (rank + kRanks - 1) % kRanks;
  static int out[kRanks][4][kCount], in[kRanks][4][kCount];
  weftComm_t c = comms[rank];
  weftStream_t s = NULL;
  int k;
  /* Tags 1, 2, 3 sent in order, taken 3, 1, 2. */
  for (k = 1; k <= 3; ++k) {
    fill(out[rank][k], rank, k);
    EXPECT(weftSendTagged(out[rank][k], kCount, weftInt32, next, k, c, NULL) == weftSuccess);
  }
  EXPECT(weftRecvTagged(in[rank][3], kCount, weftInt32, prev, 3, c, NULL) == weftSuccess);
  EXPECT(weftRecvTagged(in[rank][1], kCount, weftInt32, prev, 1, c, NULL) == weftSuccess);
  EXPECT(weftRecvTagged(in[rank][2], kCount, weftInt32, prev, 2, c, NULL) == weftSuccess);
  for (k = 1; k <= 3; ++k) EXPECT(holds(in[rank][k], prev, k));
  /* Inside a group, the receives (tags 2, then 1) before the sends. */
  memset(in[rank], 0, sizeof(in[rank]));
  EXPECT(weftGroupStart() == weftSuccess);
  EXPECT(weftRecvTagged(in[rank][2], kCount, weftInt32, prev, 2, c, NULL) == weftSuccess);
  EXPECT(weftRecvTagged(in[rank][1], kCount, weftInt32, prev, 1, c, NULL) == weftSuccess);
  EXPECT(weftSendTagged(out[rank][1], kCount, weftInt32, next, 1, c, NULL) == weftSuccess);
  EXPECT(weftSendTagged(out[rank][2], kCount, weftInt32, next, 2, c, NULL) == weftSuccess);
  EXPECT(weftGroupEnd() == weftSuccess);
  EXPECT(holds(in[rank][1], prev, 1) && holds(in[rank][2], prev, 2));
  /* On a host stream; tag 0 is weftSend/weftRecv. */
  memset(in[rank], 0, sizeof(in[rank]));
  fill(out[rank][0], rank, 0);
  EXPECT(weftStreamCreate(&s) == weftSuccess);
  EXPECT(weftSendTagged(out[rank][3], kCount, weftInt32, next, WEFT_TAG_MAX, c, s) == weftSuccess);
  EXPECT(weftSend(out[rank][0], kCount, weftInt32, next, c, s) == weftSuccess);
  EXPECT(weftRecvTagged(in[rank][0], kCount, weftInt32, prev, 0, c, s) == weftSuccess);
  EXPECT(weftRecvTagged(in[rank][3], kCount, weftInt32, prev, WEFT_TAG_MAX, c, s) == weftSuccess);
  EXPECT(weftStreamSynchronize(s) == weftSuccess);
  EXPECT(weftStreamDestroy(s) == weftSuccess);
  EXPECT(holds(in[rank][0], prev, 0) && holds(in[rank][3], prev, 3));
  /* Refused, naming the tag, in this thread's last error. */
  EXPECT(weftSendTagged(out[rank][0], 4, weftInt32, next, -1, c, NULL) == weftInvalidArgument);
  EXPECT(strstr(weftGetLastError(), "tag = -1 is outside [0, 32767]") != NULL);
  EXPECT(weftRecvTagged(in[rank][0], 4, weftInt32, prev, WEFT_TAG_MAX + 1, c, NULL) == weftInvalidArgument);
  EXPECT(strstr(weftGetLastError(), "weftRecvTagged") != NULL && strstr(weftGetLastError(), "tag = 32768") != NULL);
  EXPECT(weftSendTagged(out[rank][0], 4, weftInt32, next, 1, NULL, NULL) == weftInvalidArgument);
  EXPECT(strstr(weftGetLastError(), "comm is NULL") != NULL);
  EXPECT(weftRecvTagged(NULL, 4, weftInt32, prev, 1, c, NULL) == weftInvalidArgument);
  EXPECT(strstr(weftGetLastError(), "recvbuf is NULL") != NULL);
  EXPECT(weftSendTagged(out[rank][0], 4, weftInt32, kRanks, 1, c, NULL) == weftInvalidArgument);
  EXPECT(strstr(weftGetLastError(), "peer = 3") != NULL);
  EXPECT(weftRecvTagged(NULL, 0, weftInt32, prev, 7, c, NULL) == weftSuccess); /* count 0 matches nothing */
  any_source(rank);
  return NULL;
}

int main(void) {
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  pthread_t threads[kRanks];
  int r;
  cfg.timeout_ms = 20000;
  EXPECT(weftCommInitInProcess(comms, kRanks, &cfg) == weftSuccess);
  for (r = 0; r < kRanks; ++r) pthread_create(&threads[r], NULL, rank_main, (void*)(size_t)r);
  for (r = 0; r < kRanks; ++r) pthread_join(threads[r], NULL);
  for (r = 0; r < kRanks; ++r) EXPECT(weftCommDestroy(comms[r]) == weftSuccess);
  if (failures == 0) printf("point-to-point ABI: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
