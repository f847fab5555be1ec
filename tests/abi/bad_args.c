/* The C ABI from C99 with nothing but the header: every entry point called
 * with bad arguments must return the documented code, leave a message naming
 * the argument, and never crash. That includes a hostile caller's: sizes
 * whose byte counts overflow or wrap a pointer, implausible worlds, and enum
 * arguments holding values outside their enums, refused at once (no
 * out-of-bounds access, no loop over 2^64 elements). Also freezes the ABI's
 * sizes and values. */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "weft/weft.h"

static int failures = 0;

#define EXPECT(cond)                                                     \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

/* r == want, and the last error mentions `needle`. */
static void expect_fail(weftResult_t r, weftResult_t want, const char* needle, int line) {
  if (r != want) {
    fprintf(stderr, "line %d: got %d (%s), want %d; last error: %s\n", line, (int)r, weftGetErrorString(r),
            (int)want, weftGetLastError());
    ++failures;
  } else if (strstr(weftGetLastError(), needle) == NULL) {
    fprintf(stderr, "line %d: last error \"%s\" does not mention \"%s\"\n", line, weftGetLastError(), needle);
    ++failures;
  }
}
#define FAILS(call, want, needle) expect_fail((call), (want), (needle), __LINE__)

/* Frozen ABI: these change only with a new soname. */
typedef char check_config_size[sizeof(weftConfig_t) == 56 ? 1 : -1];
typedef char check_result_values[(weftInProgress == 9 && weftNumResults == 10) ? 1 : -1];
typedef char check_type_values[(weftFloat32 == 0 && weftFloat16 == 1 && weftBfloat16 == 2 && weftFloat64 == 3 &&
                                weftInt8 == 4 && weftUint8 == 5 && weftInt32 == 6 && weftInt64 == 7 &&
                                weftInt16 == 8) ? 1 : -1];
/* Grows when a type is appended: the values above never move. */
typedef char check_type_count[(weftNumTypes == 9) ? 1 : -1];
typedef char check_op_values[(weftAvg == 4) ? 1 : -1];
typedef char check_shard_config_size[sizeof(weftShardGroupConfig_t) == 24 ? 1 : -1];
typedef char check_param_desc_size[sizeof(weftParamDesc_t) == 80 ? 1 : -1];
typedef char check_tensor_size[sizeof(weftTensor_t) == 24 ? 1 : -1];
typedef char check_schedule_config_size[sizeof(weftShardScheduleConfig_t) == 48 ? 1 : -1];
typedef char check_store_size[sizeof(weftStore_t) == 32 ? 1 : -1];
typedef char check_reducer_config_size[sizeof(weftReducerConfig_t) == 56 ? 1 : -1];
typedef char check_kernel_config_size[sizeof(weftKernelConfig_t) == 16 ? 1 : -1];
typedef char check_memory_auto[(WEFT_MEMORY_AUTO == -1 && weftMemoryHost == 0 && weftMemoryCuda == 1) ? 1 : -1];
typedef char check_unique_id_size[sizeof(weftUniqueId) == WEFT_UNIQUE_ID_BYTES ? 1 : -1];
/* Versioned structs end without tail padding, so a field appended to one
 * makes it larger and its size stamp names one version (weft/types.h). */
#define ENDS_FLUSH(T, last) (offsetof(T, last) + sizeof(((T*)0)->last) == sizeof(T))
typedef char check_config_tail[ENDS_FLUSH(weftConfig_t, reserved2) ? 1 : -1];
typedef char check_store_tail[ENDS_FLUSH(weftStore_t, get) ? 1 : -1];
typedef char check_reducer_config_tail[ENDS_FLUSH(weftReducerConfig_t, names) ? 1 : -1];
typedef char check_shard_config_tail[ENDS_FLUSH(weftShardGroupConfig_t, reduction) ? 1 : -1];
typedef char check_schedule_config_tail[ENDS_FLUSH(weftShardScheduleConfig_t, reserved0) ? 1 : -1];
typedef char check_kernel_config_tail[ENDS_FLUSH(weftKernelConfig_t, reserved0) ? 1 : -1];
/* The historical sizes weft still reads: the field each older version ended before. */
typedef char check_config_v32[offsetof(weftConfig_t, bootstrap_timeout_ms) == 32 ? 1 : -1];
typedef char check_config_v40[offsetof(weftConfig_t, wait) == 40 ? 1 : -1];
typedef char check_config_v48[offsetof(weftConfig_t, trust_memory) == 48 ? 1 : -1];
typedef char check_schedule_v40[offsetof(weftShardScheduleConfig_t, memory) == 40 ? 1 : -1];
/* Enum fields and arguments are 32-bit ints (weft/types.h). */
typedef char check_enum_width[(sizeof(weftResult_t) == 4 && sizeof(weftDataType_t) == 4 && sizeof(weftRedOp_t) == 4 &&
                               sizeof(weftBackend_t) == 4 && sizeof(weftMemoryKind_t) == 4 &&
                               sizeof(weftShardLayout_t) == 4 && sizeof(weftGradReduction_t) == 4) ? 1 : -1];

/* An acquire callback that has no memory to give. */
static void* no_memory(void* user, weftShardGroup_t group, size_t bytes) {
  (void)user;
  (void)group;
  (void)bytes;
  return NULL;
}

/* An enum argument holding `v`, as a C caller (or ctypes) can pass it. */
static weftDataType_t bad_type(int v) {
  weftDataType_t t;
  memcpy(&t, &v, sizeof t);
  return t;
}

static weftRedOp_t bad_op(int v) {
  weftRedOp_t op;
  memcpy(&op, &v, sizeof op);
  return op;
}

static void shard_group_sizes(weftComm_t comm) {
  weftShardGroup_t g = NULL;
  weftParamDesc_t huge = {"huge", 1, {INT64_MAX}};
  FAILS(weftShardGroupCreate(comm, NULL, &huge, 1, NULL, &g), weftInvalidArgument, "params[0]");
  weftParamDesc_t wide = {"wide", 2, {INT64_C(1) << 40, INT64_C(1) << 20}};
  FAILS(weftShardGroupCreate(comm, NULL, &wide, 1, NULL, &g), weftInvalidArgument, "params[0]");
  weftParamDesc_t two[2] = {{"a", 1, {INT64_C(1) << 61}}, {"b", 1, {INT64_C(1) << 61}}};
  FAILS(weftShardGroupCreate(comm, NULL, two, 2, NULL, &g), weftInvalidArgument, "bytes");
  weftShardGroupConfig_t cfg = WEFT_SHARD_GROUP_CONFIG_INITIALIZER;
  cfg.param_dtype = bad_type(1000);
  weftParamDesc_t ok = {"ok", 1, {8}};
  FAILS(weftShardGroupCreate(comm, NULL, &ok, 1, &cfg, &g), weftInvalidArgument, "param_dtype = 1000");
  if (weftShardGroupCreate(comm, NULL, &ok, 1, NULL, &g) != weftSuccess) {
    fprintf(stderr, "a plain shard group was refused: %s\n", weftGetLastError());
    ++failures;
  } else {
    weftShardGroupDestroy(g);
  }
}

/* Size stamps: exactly the sizes each versioned struct has had are read;
 * any other is refused, naming the struct, the size and the sizes known. */
static int fail_set(void* ctx, const char* key, const void* value, size_t len) {
  (void)ctx;
  (void)key;
  (void)value;
  (void)len;
  return 1;
}

static int fail_get(void* ctx, const char* key, void* value, size_t cap, size_t* len, int timeout_ms) {
  (void)ctx;
  (void)key;
  (void)value;
  (void)cap;
  (void)len;
  (void)timeout_ms;
  return 1;
}

static void size_stamps(weftComm_t comm) {
  weftComm_t c = NULL;
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.backend = weftBackendInProcess;
  cfg.size = 32; /* a caller built before bootstrap_timeout_ms: the rest is defaulted */
  cfg.bootstrap_timeout_ms = -5;
  EXPECT(weftCommInitWorld(&c, &cfg) == weftSuccess);
  if (c != NULL) EXPECT(weftCommDestroy(c) == weftSuccess);
  cfg.bootstrap_timeout_ms = 0;
  cfg.size = 36;
  FAILS(weftCommInitWorld(&c, &cfg), weftInvalidArgument, "config->size = 36 is not a size weftConfig_t has had (32, 40, 48, 56)");
  cfg.size = 16;
  FAILS(weftCommInitWorld(&c, &cfg), weftInvalidArgument, "config->size = 16 is not a size weftConfig_t has had (32, 40, 48, 56)");
  cfg.size = 40; /* a caller built before wait: the rest is defaulted */
  cfg.wait = (weftWaitPolicy_t)99;
  EXPECT(weftCommInitWorld(&c, &cfg) == weftSuccess);
  if (c != NULL) EXPECT(weftCommDestroy(c) == weftSuccess);
  cfg.size = 48;
  FAILS(weftCommInitWorld(&c, &cfg), weftInvalidArgument, "config->wait = 99 is not a weftWaitPolicy_t (expected 0..3)");
  cfg.wait = weftWaitDefault;
  cfg.size = 64;
  FAILS(weftCommInitWorld(&c, &cfg), weftInvalidArgument, "config->size = 64 is larger than any size of weftConfig_t");
  {
    weftStore_t st = WEFT_STORE_INITIALIZER;
    st.set = fail_set;
    st.get = fail_get;
    st.size = 24;
    FAILS(weftCommInitStore(&c, 1, 0, &st, "p", NULL), weftInvalidArgument,
          "store->size = 24 is not a size weftStore_t has had (32)");
  }
  {
    weftReducerConfig_t rc = WEFT_REDUCER_CONFIG_INITIALIZER;
    weftTensor_t g = {NULL, 4, weftFloat32};
    weftReducer_t red = NULL;
    rc.size = 48;
    FAILS(weftReducerCreate(comm, &g, 1, &rc, &red), weftInvalidArgument,
          "config->size = 48 is not a size weftReducerConfig_t has had (56)");
  }
  {
    weftShardGroupConfig_t gc = WEFT_SHARD_GROUP_CONFIG_INITIALIZER;
    weftParamDesc_t ok = {"ok", 1, {8}};
    weftShardGroup_t g = NULL;
    gc.size = 20;
    FAILS(weftShardGroupCreate(comm, NULL, &ok, 1, &gc, &g), weftInvalidArgument,
          "config->size = 20 is not a size weftShardGroupConfig_t has had (24)");
  }
  {
    weftShardScheduleConfig_t qc = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
    weftShardSchedule_t s = NULL;
    qc.size = 44;
    FAILS(weftShardScheduleCreate(NULL, &qc, &s), weftInvalidArgument,
          "config->size = 44 is not a size weftShardScheduleConfig_t has had (40, 48)");
    qc.size = 40; /* a caller built before `memory`: host memory */
    qc.memory = weftMemoryCuda;
    EXPECT(weftShardScheduleCreate(NULL, &qc, &s) == weftSuccess && s != NULL);
    if (s != NULL) EXPECT(weftShardScheduleDestroy(s) == weftSuccess);
  }
}

static void kernel_sizes(void) {
  float src[4] = {1, 2, 3, 4}, dst[64];
  float norms[1], total = 0;
  weftTensor_t one = {src, 4, weftFloat32};
  weftTensor_t endless = {src, SIZE_MAX, weftFloat32};
  weftTensor_t wrapping = {src, SIZE_MAX / 4 + 2, weftFloat32}; /* count * 4 wraps to a few bytes */
  weftTensor_t vast = {src, (size_t)1 << 60, weftFloat32};     /* no overflow, but no machine holds it */
  size_t near_end[1] = {SIZE_MAX - 1};
  size_t wraps_ptr[1] = {SIZE_MAX / 4};
  const weftTensor_t chunk_srcs[1] = {{src, 4, weftFloat32}};
  int found_inf = 0;

  FAILS(weftFlatten(&one, 1, dst, weftFloat32, near_end, 1.0f, NULL), weftInvalidArgument, "offsets[0]");
  FAILS(weftFlatten(&one, 1, dst, weftFloat32, wraps_ptr, 1.0f, NULL), weftInvalidArgument, "offsets[0]");
  FAILS(weftUnflatten(dst, weftFloat32, near_end, &one, 1, 1.0f, 0, NULL), weftInvalidArgument, "offsets[0]");
  FAILS(weftUnflatten(dst, weftFloat32, wraps_ptr, &one, 1, 1.0f, 0, NULL), weftInvalidArgument, "offsets[0]");
  FAILS(weftFlatten(&endless, 1, dst, weftFloat32, NULL, 1.0f, NULL), weftInvalidArgument, "srcs[0].count");
  FAILS(weftFlatten(&wrapping, 1, dst, weftFloat32, NULL, 1.0f, NULL), weftInvalidArgument, "srcs[0].count");
  FAILS(weftFlatten(&vast, 1, dst, weftFloat32, NULL, 1.0f, NULL), weftInvalidArgument, "srcs[0].count");
  FAILS(weftUnflatten(dst, weftFloat32, NULL, &endless, 1, 1.0f, 0, NULL), weftInvalidArgument, "dsts[0].count");
  FAILS(weftL2Norm(&endless, 1, norms, &total, NULL), weftInvalidArgument, "tensors[0].count");
  FAILS(weftL2Norm(&wrapping, 1, norms, &total, NULL), weftInvalidArgument, "tensors[0].count");
  FAILS(weftUnscaleCheckFinite(&endless, 1, 1.0f, &found_inf, NULL), weftInvalidArgument, "tensors[0].count");
  FAILS(weftChunkCat(chunk_srcs, 1, INT_MAX, NULL, dst, weftFloat32, 1.0f, NULL), weftInvalidArgument,
        "world = 2147483647");
  FAILS(weftChunkSplit(dst, weftFloat32, INT_MAX, NULL, &one, 1, 1.0f, 0, NULL), weftInvalidArgument,
        "world = 2147483647");
  {
    size_t chunk[1] = {SIZE_MAX / 8};
    FAILS(weftChunkCat(chunk_srcs, 1, 4, chunk, dst, weftFloat32, 1.0f, NULL), weftInvalidArgument, "chunk_counts");
  }
  {
    weftCopyPlan_t plan = NULL;
    FAILS(weftFlattenPlanCreate(&one, 1, dst, weftFloat32, near_end, &plan), weftInvalidArgument, "offsets[0]");
    FAILS(weftUnflattenPlanCreate(dst, weftFloat32, wraps_ptr, &one, 1, 0, &plan), weftInvalidArgument,
          "offsets[0]");
  }
  {
    /* The Ex calls check the same, and their config. */
    weftKernelConfig_t kc = WEFT_KERNEL_CONFIG_INITIALIZER;
    kc.memory = weftMemoryHost;
    FAILS(weftFlattenEx(&endless, 1, dst, weftFloat32, NULL, 1.0f, &kc, NULL), weftInvalidArgument, "srcs[0].count");
    FAILS(weftUnflattenEx(dst, weftFloat32, near_end, &one, 1, 1.0f, 0, &kc, NULL), weftInvalidArgument,
          "offsets[0]");
    FAILS(weftL2NormEx(&wrapping, 1, norms, &total, &kc, NULL), weftInvalidArgument, "tensors[0].count");
    FAILS(weftUnscaleCheckFiniteEx(&one, 1, 1.0f, NULL, &kc, NULL), weftInvalidArgument, "found_inf is NULL");
    FAILS(weftChunkCatEx(chunk_srcs, 1, INT_MAX, NULL, dst, weftFloat32, 1.0f, &kc, NULL), weftInvalidArgument,
          "world = 2147483647");
    FAILS(weftChunkSplitEx(dst, weftFloat32, INT_MAX, NULL, &one, 1, 1.0f, 0, &kc, NULL), weftInvalidArgument,
          "world = 2147483647");
    kc.memory = 3;
    FAILS(weftFlattenEx(&one, 1, dst, weftFloat32, NULL, 1.0f, &kc, NULL), weftInvalidArgument, "config->memory = 3");
    kc.memory = WEFT_MEMORY_AUTO;
    kc.size = 12;
    FAILS(weftL2NormEx(&one, 1, norms, &total, &kc, NULL), weftInvalidArgument, "config->size = 12");
    kc.size = sizeof(kc);
    if (weftL2NormEx(&one, 1, norms, &total, &kc, NULL) != weftSuccess || total * total < 29.99f ||
        total * total > 30.01f) {
      fprintf(stderr, "weftL2NormEx with WEFT_MEMORY_AUTO failed: %s\n", weftGetLastError());
      ++failures;
    }
  }
  /* The same calls with sane sizes still work. */
  if (weftFlatten(&one, 1, dst, weftFloat32, NULL, 1.0f, NULL) != weftSuccess ||
      weftL2Norm(&one, 1, norms, &total, NULL) != weftSuccess || total * total < 29.99f || total * total > 30.01f) {
    fprintf(stderr, "sane kernel calls failed: %s\n", weftGetLastError());
    ++failures;
  }
}

static void enum_values(weftComm_t comm) {
  float buf[4] = {1, 2, 3, 4};
  weftTensor_t t = {buf, 4, bad_type(-3)};
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  weftComm_t other = NULL;
  weftShardScheduleConfig_t qc = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
  weftShardSchedule_t s = NULL;
  int backend = 1000, memory = -7, layout = 77;

  FAILS(weftAllReduce(buf, buf, 4, bad_type(1000), weftSum, comm, NULL), weftInvalidArgument, "datatype = 1000");
  FAILS(weftAllReduce(buf, buf, 4, weftFloat32, bad_op(-5), comm, NULL), weftInvalidArgument, "op = -5");
  FAILS(weftReduceScatter(buf, buf, 4, weftFloat32, bad_op(256), comm, NULL), weftInvalidArgument, "op = 256");
  FAILS(weftAllGather(buf, buf, 4, bad_type(64), comm, NULL), weftInvalidArgument, "datatype = 64");
  FAILS(weftBroadcast(buf, buf, 4, bad_type(-1), 0, comm, NULL), weftInvalidArgument, "datatype = -1");
  memcpy(&cfg.backend, &backend, sizeof backend);
  FAILS(weftCommInitWorld(&other, &cfg), weftInvalidArgument, "config->backend = 1000");
  cfg.backend = weftBackendAuto;
  memcpy(&cfg.memory, &memory, sizeof memory);
  FAILS(weftCommInitWorld(&other, &cfg), weftInvalidArgument, "config->memory = -7");
  FAILS(weftFlatten(&t, 1, buf, weftFloat32, NULL, 1.0f, NULL), weftInvalidArgument, "srcs[0].dtype = -3");
  FAILS(weftFlatten(NULL, 0, buf, bad_type(99), NULL, 1.0f, NULL), weftInvalidArgument, "dst_dtype = 99");
  FAILS(weftL2Norm(&t, 1, buf, buf + 1, NULL), weftInvalidArgument, "tensors[0].dtype = -3");
  {
    /* int16 (appended): the collectives take it; the kernels, float only, refuse it by name. */
    int16_t s[4] = {30000, -2, 7, 1};
    weftTensor_t t16 = {s, 4, weftInt16};
    EXPECT(weftAllReduce(s, s, 4, weftInt16, weftMax, comm, NULL) == weftSuccess && s[0] == 30000 && s[1] == -2);
    FAILS(weftFlatten(&t16, 1, buf, weftFloat32, NULL, 1.0f, NULL), weftInvalidArgument, "srcs[0].dtype = int16");
  }
  memcpy(&qc.memory, &memory, sizeof memory);
  FAILS(weftShardScheduleCreate(NULL, &qc, &s), weftInvalidArgument, "config->memory = -7");
  {
    weftShardGroupConfig_t gc = WEFT_SHARD_GROUP_CONFIG_INITIALIZER;
    weftParamDesc_t ok = {"ok", 1, {8}};
    weftShardGroup_t g = NULL;
    memcpy(&gc.layout, &layout, sizeof layout);
    FAILS(weftShardGroupCreate(comm, NULL, &ok, 1, &gc, &g), weftInvalidArgument, "config->layout = 77");
  }
}

int main(void) {
  weftComm_t comm = NULL, bad = NULL;
  weftStream_t stream = NULL;
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int n = 0, version = 0;
  weftResult_t async = weftSuccess;
  weftBackend_t backend;
  weftMemoryKind_t memory;

  EXPECT(weftGetVersion(&version) == weftSuccess && version == WEFT_VERSION_CODE);
  FAILS(weftGetVersion(NULL), weftInvalidArgument, "version is NULL");
  EXPECT(weftGetErrorString((weftResult_t)12345) != NULL);
  EXPECT(weftGetLastError() != NULL);

  FAILS(weftCommInitWorld(NULL, NULL), weftInvalidArgument, "comm is NULL");
  cfg.size = 0;
  FAILS(weftCommInitWorld(&comm, &cfg), weftInvalidArgument, "config->size = 0");
  cfg.size = sizeof(cfg);
  cfg.memory = (weftMemoryKind_t)7;
  FAILS(weftCommInitWorld(&comm, &cfg), weftInvalidArgument, "config->memory = 7");
  cfg.memory = weftMemoryHost;
  cfg.timeout_ms = -1;
  FAILS(weftCommInitWorld(&comm, &cfg), weftInvalidArgument, "config->timeout_ms = -1");
  FAILS(weftCommInitInProcess(NULL, 2, NULL), weftInvalidArgument, "comms is NULL");
  FAILS(weftCommInitInProcess(&comm, 0, NULL), weftInvalidArgument, "nranks = 0");

  EXPECT(weftCommInitWorld(&comm, NULL) == weftSuccess);
  FAILS(weftCommSplit(NULL, 0, 0, &bad), weftInvalidArgument, "comm is NULL");
  FAILS(weftCommSplit(comm, 0, 0, NULL), weftInvalidArgument, "newcomm is NULL");
  FAILS(weftCommSplit(comm, -5, 0, &bad), weftInvalidArgument, "color = -5");
  FAILS(weftCommCount(NULL, &n), weftInvalidArgument, "comm is NULL");
  FAILS(weftCommCount(comm, NULL), weftInvalidArgument, "count is NULL");
  FAILS(weftCommUserRank(comm, NULL), weftInvalidArgument, "rank is NULL");
  FAILS(weftCommGetBackend(comm, NULL), weftInvalidArgument, "backend is NULL");
  FAILS(weftCommGetMemoryKind(comm, NULL), weftInvalidArgument, "memory is NULL");
  FAILS(weftCommGetCudaDevice(comm, NULL), weftInvalidArgument, "device is NULL");
  FAILS(weftCommGetCudaDevice(NULL, &n), weftInvalidArgument, "comm is NULL");
  FAILS(weftCommGetAsyncError(comm, NULL), weftInvalidArgument, "asyncError is NULL");
  FAILS(weftCommAbort(NULL), weftInvalidArgument, "comm is NULL");
  FAILS(weftCommDestroy(NULL), weftInvalidArgument, "comm is NULL");
  FAILS(weftBarrier(NULL), weftInvalidArgument, "comm is NULL");

  FAILS(weftAllReduce(buf, buf, 8, weftFloat32, weftSum, NULL, NULL), weftInvalidArgument, "comm is NULL");
  FAILS(weftAllReduce(NULL, buf, 8, weftFloat32, weftSum, comm, NULL), weftInvalidArgument, "sendbuf is NULL");
  FAILS(weftAllReduce(buf, NULL, 8, weftFloat32, weftSum, comm, NULL), weftInvalidArgument, "recvbuf is NULL");
  FAILS(weftAllReduce(buf, buf, 8, (weftDataType_t)-1, weftSum, comm, NULL), weftInvalidArgument, "datatype = -1");
  FAILS(weftAllReduce(buf, buf, 8, weftFloat32, weftNumOps, comm, NULL), weftInvalidArgument, "op = 5");
  FAILS(weftAllReduce(buf, buf, SIZE_MAX, weftFloat32, weftSum, comm, NULL), weftInvalidArgument, "overflows");
  FAILS(weftAllReduce(buf, buf, 8, weftFloat32, weftSum, comm, (void*)buf), weftInvalidArgument, "stream");
  FAILS(weftReduceScatter(NULL, buf, 4, weftFloat32, weftSum, comm, NULL), weftInvalidArgument, "sendbuf is NULL");
  FAILS(weftReduceScatter(buf, buf, 4, weftFloat32, (weftRedOp_t)99, comm, NULL), weftInvalidArgument, "op = 99");
  FAILS(weftAllGather(buf, NULL, 4, weftFloat32, comm, NULL), weftInvalidArgument, "recvbuf is NULL");
  FAILS(weftAllGather(buf, buf, 4, weftNumTypes, comm, NULL), weftInvalidArgument, "datatype = 9");
  FAILS(weftBroadcast(buf, buf, 8, weftFloat32, 1, comm, NULL), weftInvalidArgument, "root = 1");
  FAILS(weftBroadcast(buf, buf, 8, weftFloat32, -1, comm, NULL), weftInvalidArgument, "root = -1");
  FAILS(weftBroadcast(NULL, buf, 8, weftFloat32, 0, comm, NULL), weftInvalidArgument, "sendbuf is NULL");

  /* Point-to-point, rooted and all-to-all calls: the same checks. */
  {
    size_t one[1] = {1}, zero[1] = {0}, big[1] = {SIZE_MAX / 2};
    FAILS(weftSend(buf, 8, weftFloat32, 0, NULL, NULL), weftInvalidArgument, "comm is NULL");
    FAILS(weftSend(buf, 8, weftFloat32, 1, comm, NULL), weftInvalidArgument, "peer = 1");
    FAILS(weftSend(buf, 8, weftFloat32, -1, comm, NULL), weftInvalidArgument, "peer = -1");
    FAILS(weftSend(NULL, 8, weftFloat32, 0, comm, NULL), weftInvalidArgument, "sendbuf is NULL");
    FAILS(weftSend(buf, 8, (weftDataType_t)9, 0, comm, NULL), weftInvalidArgument, "datatype = 9");
    FAILS(weftSend(buf, 8, weftFloat32, 0, comm, (void*)buf), weftInvalidArgument, "stream");
    FAILS(weftRecv(NULL, 8, weftFloat32, 0, comm, NULL), weftInvalidArgument, "recvbuf is NULL");
    FAILS(weftRecv(buf, SIZE_MAX, weftFloat32, 0, comm, NULL), weftInvalidArgument, "overflows");
    FAILS(weftRecv(buf, 8, weftFloat32, 3, comm, NULL), weftInvalidArgument, "peer = 3");
    FAILS(weftReduce(buf, buf, 8, weftFloat32, weftSum, 1, comm, NULL), weftInvalidArgument, "root = 1");
    FAILS(weftReduce(buf, buf, 8, weftFloat32, (weftRedOp_t)6, 0, comm, NULL), weftInvalidArgument, "op = 6");
    FAILS(weftReduce(buf, NULL, 8, weftFloat32, weftSum, 0, comm, NULL), weftInvalidArgument, "recvbuf is NULL");
    FAILS(weftReduce(buf, buf + 1, 4, weftFloat32, weftSum, 0, comm, NULL), weftInvalidArgument, "overlap");
    FAILS(weftGather(NULL, buf, 4, weftFloat32, 0, comm, NULL), weftInvalidArgument, "sendbuf is NULL");
    FAILS(weftGather(buf, buf, 4, weftFloat32, -3, comm, NULL), weftInvalidArgument, "root = -3");
    FAILS(weftGather(buf, buf + 1, 4, weftFloat32, 0, comm, NULL), weftInvalidArgument, "in-place slice");
    FAILS(weftScatter(buf, NULL, 4, weftFloat32, 0, comm, NULL), weftInvalidArgument, "recvbuf is NULL");
    FAILS(weftScatter(buf, buf, 4, weftNumTypes, 0, comm, NULL), weftInvalidArgument, "datatype = 9");
    FAILS(weftScatter(buf, buf, SIZE_MAX, weftFloat32, 0, comm, NULL), weftInvalidArgument, "recvcount");
    FAILS(weftAllToAll(buf, buf, 4, weftFloat32, comm, NULL), weftInvalidArgument, "never in place");
    FAILS(weftAllToAll(buf, NULL, 4, weftFloat32, comm, NULL), weftInvalidArgument, "recvbuf is NULL");
    FAILS(weftAllToAll(buf, buf, 4, weftFloat32, NULL, NULL), weftInvalidArgument, "comm is NULL");
    FAILS(weftAllToAllv(buf, NULL, zero, buf + 4, one, zero, weftFloat32, comm, NULL), weftInvalidArgument,
          "sendcounts is NULL");
    FAILS(weftAllToAllv(buf, one, NULL, buf + 4, one, zero, weftFloat32, comm, NULL), weftInvalidArgument,
          "sdispls is NULL");
    FAILS(weftAllToAllv(buf, one, zero, buf + 4, NULL, zero, weftFloat32, comm, NULL), weftInvalidArgument,
          "recvcounts is NULL");
    FAILS(weftAllToAllv(buf, one, zero, buf + 4, one, NULL, weftFloat32, comm, NULL), weftInvalidArgument,
          "rdispls is NULL");
    FAILS(weftAllToAllv(buf, one, big, buf + 4, one, zero, weftFloat32, comm, NULL), weftInvalidArgument,
          "overflows");
    FAILS(weftAllToAllv(buf, one, zero, buf, one, zero, weftFloat32, comm, NULL), weftInvalidArgument,
          "never in place");
    FAILS(weftAllToAllv(buf, one, zero, NULL, one, zero, weftFloat32, comm, NULL), weftInvalidArgument,
          "recvbuf is NULL");
    FAILS(weftGroupEnd(), weftInvalidUsage, "no group");
    /* One rank: every call works, alone and in a group whose receive comes first. */
    {
      float in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
      EXPECT(weftGroupStart() == weftSuccess);
      EXPECT(weftRecv(out, 4, weftFloat32, 0, comm, NULL) == weftSuccess);
      FAILS(weftSend(in, 4, weftFloat32, 2, comm, NULL), weftInvalidArgument, "peer = 2"); /* refused, group goes on */
      EXPECT(weftSend(in, 4, weftFloat32, 0, comm, NULL) == weftSuccess);
      FAILS(weftCommSplit(comm, 0, 0, &bad), weftInvalidUsage, "inside a group");
      EXPECT(weftGroupEnd() == weftSuccess);
      EXPECT(out[0] == 1 && out[3] == 4);
      EXPECT(weftReduce(in, out, 4, weftFloat32, weftMax, 0, comm, NULL) == weftSuccess && out[2] == 3);
      EXPECT(weftAllToAllv(in, one, zero, out, one, zero, weftInt32, comm, NULL) == weftSuccess);
      EXPECT(weftGather(in, out, 2, weftFloat32, 0, comm, NULL) == weftSuccess && out[1] == 2);
      EXPECT(weftScatter(in, out, 2, weftFloat32, 0, comm, NULL) == weftSuccess);
      EXPECT(weftAllToAll(in, out, 3, weftFloat32, comm, NULL) == weftSuccess && out[2] == 3);
    }
  }

  /* count 0 with NULL buffers is a valid no-op, as in NCCL. */
  EXPECT(weftAllReduce(NULL, NULL, 0, weftFloat32, weftSum, comm, NULL) == weftSuccess);
  EXPECT(weftSend(NULL, 0, weftFloat32, 0, comm, NULL) == weftSuccess);
  EXPECT(weftRecv(NULL, 0, weftFloat32, 0, comm, NULL) == weftSuccess);
  EXPECT(weftReduce(NULL, NULL, 0, weftFloat32, weftSum, 0, comm, NULL) == weftSuccess);
  EXPECT(weftAllToAll(NULL, NULL, 0, weftFloat32, comm, NULL) == weftSuccess);

  FAILS(weftStreamCreate(NULL), weftInvalidArgument, "stream is NULL");
  FAILS(weftStreamCreateWithFlags(NULL, weftStreamWaitersRun), weftInvalidArgument, "stream is NULL");
  FAILS(weftStreamCreateWithFlags(&stream, 0x6), weftInvalidArgument, "flags = 0x6");
  EXPECT(weftStreamCreateWithFlags(&stream, weftStreamWaitersRun | weftStreamIssuerCpu) == weftSuccess);
  EXPECT(weftAllReduce(buf, buf, 8, weftFloat32, weftMax, comm, stream) == weftSuccess);
  EXPECT(weftStreamSynchronize(stream) == weftSuccess);
  EXPECT(weftStreamDestroy(stream) == weftSuccess);
  FAILS(weftStreamSynchronize(NULL), weftInvalidArgument, "stream is NULL");
  FAILS(weftStreamQuery((weftStream_t)(void*)buf), weftInvalidArgument, "not a live weft host stream");
  FAILS(weftStreamDestroy(NULL), weftInvalidArgument, "stream is NULL");
  EXPECT(weftStreamCreate(&stream) == weftSuccess);
  EXPECT(weftAllReduce(buf, buf, 8, weftFloat32, weftMax, comm, stream) == weftSuccess);
  EXPECT(weftStreamSynchronize(stream) == weftSuccess);
  EXPECT(weftStreamDestroy(stream) == weftSuccess);

  {
    weftShardGroup_t group = NULL;
    weftShardGroupConfig_t scfg = WEFT_SHARD_GROUP_CONFIG_INITIALIZER;
    weftParamDesc_t p = {"w", 1, {8, 0, 0, 0, 0, 0, 0, 0}};
    weftShardDesc_t desc;
    weftShardMemory_t mem;
    void* data = NULL;
    FAILS(weftShardGroupCreate(NULL, NULL, &p, 1, NULL, &group), weftInvalidArgument, "comm is NULL");
    FAILS(weftShardGroupCreate(comm, NULL, NULL, 1, NULL, &group), weftInvalidArgument, "params is NULL");
    FAILS(weftShardGroupCreate(comm, NULL, &p, 1, NULL, NULL), weftInvalidArgument, "group is NULL");
    p.ndim = 9;
    FAILS(weftShardGroupCreate(comm, NULL, &p, 1, NULL, &group), weftInvalidArgument, "params[0].ndim = 9");
    p.ndim = 1;
    p.shape[0] = -2;
    FAILS(weftShardGroupCreate(comm, NULL, &p, 1, NULL, &group), weftInvalidArgument, "shape[0] = -2");
    p.shape[0] = 8;
    scfg.param_dtype = weftInt32;
    FAILS(weftShardGroupCreate(comm, NULL, &p, 1, &scfg, &group), weftInvalidArgument, "param_dtype = int32");
    scfg.param_dtype = weftFloat32;
    scfg.layout = (weftShardLayout_t)3;
    FAILS(weftShardGroupCreate(comm, NULL, &p, 1, &scfg, &group), weftInvalidArgument, "config->layout = 3");
    FAILS(weftShardGroupDestroy(NULL), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupGetShard(NULL, 0, &desc), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupGetBuffers(NULL, NULL, NULL, NULL), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupLoadFull(NULL, NULL, 0), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupUnshard(NULL, NULL), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupGetFullParam(NULL, 0, &data), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupReshard(NULL), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupReduceGrads(NULL, NULL, 0, NULL), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupZeroGrads(NULL), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupGatherFull(NULL, 0, NULL, 0), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupScatterFull(NULL, 0, NULL, 0), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupGetMemory(NULL, &mem), weftInvalidArgument, "group is NULL");
    scfg.layout = weftShardFlat;
    EXPECT(weftShardGroupCreate(comm, NULL, &p, 1, &scfg, &group) == weftSuccess);
    FAILS(weftShardGroupGetShard(group, 1, &desc), weftInvalidArgument, "param = 1");
    FAILS(weftShardGroupGetShard(group, 0, NULL), weftInvalidArgument, "desc is NULL");
    FAILS(weftShardGroupLoadFull(group, NULL, 1), weftInvalidArgument, "full is NULL");
    FAILS(weftShardGroupLoadFull(group, NULL, 2), weftInvalidArgument, "n = 2");
    FAILS(weftShardGroupGetFullParam(group, 0, &data), weftInvalidUsage, "sharded");
    FAILS(weftShardGroupUnshard(group, (void*)buf), weftInvalidArgument, "stream");
    FAILS(weftShardGroupGetMemory(group, NULL), weftInvalidArgument, "memory is NULL");
    FAILS(weftShardGroupUnshardInto(group, NULL, NULL), weftInvalidArgument, "full is NULL");
    FAILS(weftShardGroupReduceGradsFlat(group, NULL, weftFloat32, NULL), weftInvalidArgument, "grads is NULL");
    FAILS(weftShardGroupReduceGradsFlat(group, buf, weftFloat16, NULL), weftInvalidArgument, "grads are float16");
    FAILS(weftShardGroupReduceGradsFlat(group, buf, (weftDataType_t)11, NULL), weftInvalidArgument, "dtype = 11");
    FAILS(weftShardGroupUnshardInto(NULL, buf, NULL), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupGetFullLayout(group, NULL, NULL, 0), weftInvalidArgument, "numel is NULL");
    {
      size_t numel = 0, offs[2];
      FAILS(weftShardGroupGetFullLayout(group, &numel, offs, 2), weftInvalidArgument, "n = 2");
      EXPECT(weftShardGroupGetFullLayout(group, &numel, offs, 1) == weftSuccess && numel == 8 && offs[0] == 0);
    }
    FAILS(weftShardGroupGatherFull(group, 3, NULL, 0), weftInvalidArgument, "root = 3");
    FAILS(weftShardGroupScatterFull(group, -1, NULL, 0), weftInvalidArgument, "root = -1");
    FAILS(weftShardGroupGatherFullFrom(NULL, buf, 0, NULL, 0), weftInvalidArgument, "group is NULL");
    FAILS(weftShardGroupGatherFullFrom(group, NULL, 0, NULL, 0), weftInvalidArgument, "shard is NULL");
    FAILS(weftShardGroupScatterFullInto(group, 0, NULL, 0, NULL), weftInvalidArgument, "shard is NULL");
    FAILS(weftShardGroupScatterFullInto(group, 2, NULL, 0, buf), weftInvalidArgument, "root = 2");
    {
      /* The schedule: every argument checked, and a refused call changes nothing. */
      weftShardSchedule_t sched = NULL;
      weftShardScheduleConfig_t qcfg = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
      weftShardGroup_t twice[2];
      weftTensor_t grad = {buf, 8, weftFloat32};
      int len = -1, held = -1, most = -1;
      twice[0] = group;
      twice[1] = group;
      FAILS(weftShardScheduleCreate(NULL, NULL, NULL), weftInvalidArgument, "schedule is NULL");
      FAILS(weftShardScheduleCreate((weftStream_t)(void*)buf, NULL, &sched), weftInvalidArgument,
            "not a live weft host stream");
      qcfg.size = 0;
      FAILS(weftShardScheduleCreate(NULL, &qcfg, &sched), weftInvalidArgument, "config->size = 0");
      qcfg.size = sizeof(qcfg);
      qcfg.reshard_after_forward = 2;
      FAILS(weftShardScheduleCreate(NULL, &qcfg, &sched), weftInvalidArgument, "reshard_after_forward = 2");
      qcfg.reshard_after_forward = 1;
      qcfg.prefetch = -1;
      FAILS(weftShardScheduleCreate(NULL, &qcfg, &sched), weftInvalidArgument, "prefetch = -1");
      qcfg.prefetch = 1;
      qcfg.memory = (weftMemoryKind_t)5;
      FAILS(weftShardScheduleCreate(NULL, &qcfg, &sched), weftInvalidArgument, "config->memory = 5");
      {
        /* CUDA memory takes the framework's cudaStream_t: a weft host stream is refused in any build. */
        weftStream_t hs = NULL;
        EXPECT(weftStreamCreate(&hs) == weftSuccess);
        qcfg.memory = weftMemoryCuda;
        FAILS(weftShardScheduleCreate(hs, &qcfg, &sched), weftInvalidArgument, "is a weft host stream");
        /* The CUDA twin takes the cudaStream_t without a cast, and refuses the same stream and host memory. */
        FAILS(weftShardScheduleCreateCuda(hs, NULL, &sched), weftInvalidArgument, "is a weft host stream");
        FAILS(weftShardScheduleCreateCuda(hs, &qcfg, &sched), weftInvalidArgument, "is a weft host stream");
        FAILS(weftShardScheduleCreateCuda(NULL, NULL, NULL), weftInvalidArgument, "schedule is NULL");
        qcfg.memory = weftMemoryHost;
        FAILS(weftShardScheduleCreateCuda(NULL, &qcfg, &sched), weftInvalidArgument, "config->memory = 0");
        qcfg.memory = (weftMemoryKind_t)5;
        FAILS(weftShardScheduleCreateCuda(NULL, &qcfg, &sched), weftInvalidArgument, "config->memory = 5");
        qcfg.size = 0;
        FAILS(weftShardScheduleCreateCuda(NULL, &qcfg, &sched), weftInvalidArgument, "config->size = 0");
        qcfg.size = sizeof(qcfg);
        EXPECT(weftStreamDestroy(hs) == weftSuccess);
      }
      qcfg.memory = weftMemoryHost;
      qcfg.acquire = no_memory;
      FAILS(weftShardScheduleCreate(NULL, &qcfg, &sched), weftInvalidArgument, "config->release is NULL");
      qcfg.acquire = NULL;
      EXPECT(sched == NULL);
      FAILS(weftShardScheduleDestroy(NULL), weftInvalidArgument, "schedule is NULL");
      FAILS(weftShardScheduleBeginStep(NULL), weftInvalidArgument, "schedule is NULL");
      FAILS(weftShardScheduleEndStep((weftShardSchedule_t)(void*)buf), weftInvalidArgument, "not a live handle");
      FAILS(weftShardSchedulePreForward(NULL, group), weftInvalidArgument, "schedule is NULL");
      EXPECT(weftShardScheduleCreate(NULL, &qcfg, &sched) == weftSuccess);
      FAILS(weftShardSchedulePreForward(sched, NULL), weftInvalidArgument, "group is NULL");
      FAILS(weftShardSchedulePreBackward(sched, (weftShardGroup_t)(void*)buf), weftInvalidArgument,
            "group = ");
      FAILS(weftShardSchedulePreForward(sched, group), weftInvalidUsage, "outside a step");
      FAILS(weftShardScheduleEndStep(sched), weftInvalidUsage, "outside a step");
      FAILS(weftShardScheduleDeclareOrder(sched, NULL, 1), weftInvalidArgument, "groups is NULL with n = 1");
      FAILS(weftShardScheduleDeclareOrder(sched, twice, -1), weftInvalidArgument, "n = -1");
      FAILS(weftShardScheduleDeclareOrder(sched, twice, 2), weftInvalidArgument, "order[1] repeats order[0]");
      EXPECT(weftShardScheduleGetState(sched, &len, &held, &most) == weftSuccess && len == 0 && held == 0);
      FAILS(weftShardScheduleSetReshardAfterForward(NULL, group, 0), weftInvalidArgument, "schedule is NULL");
      FAILS(weftShardScheduleSetReshardAfterForward(sched, NULL, 0), weftInvalidArgument, "group is NULL");
      FAILS(weftShardScheduleSetReshardAfterForward(sched, group, 2), weftInvalidArgument, "reshard = 2");
      EXPECT(weftShardScheduleDeclareOrder(sched, twice, 1) == weftSuccess);
      EXPECT(weftShardScheduleBeginStep(sched) == weftSuccess);
      FAILS(weftShardScheduleSetReshardAfterForward(sched, group, 0), weftInvalidUsage, "during a step");
      FAILS(weftShardScheduleBeginStep(sched), weftInvalidUsage, "not ended");
      FAILS(weftShardScheduleDeclareOrder(sched, twice, 1), weftInvalidUsage, "between steps");
      EXPECT(weftShardSchedulePreForward(sched, group) == weftSuccess);
      EXPECT(weftShardScheduleGetState(sched, &len, &held, &most) == weftSuccess && len == 1 && held == 1);
      FAILS(weftShardSchedulePostBackward(sched, group, &grad, 1), weftInvalidUsage, "no PreBackward");
      EXPECT(weftShardSchedulePreBackward(sched, group) == weftSuccess);
      FAILS(weftShardSchedulePostBackward(sched, group, &grad, 2), weftInvalidArgument, "n = 2");
      FAILS(weftShardSchedulePostBackward(sched, group, NULL, 1), weftInvalidArgument, "grads is NULL");
      grad.count = 7;
      FAILS(weftShardSchedulePostBackward(sched, group, &grad, 1), weftInvalidArgument, "grads[0].count = 7");
      /* Refused: the group is still gathered. */
      EXPECT(weftShardScheduleGetState(sched, &len, &held, &most) == weftSuccess && held == 1);
      grad.count = 8;
      EXPECT(weftShardSchedulePostBackward(sched, group, &grad, 1) == weftSuccess);
      EXPECT(weftShardScheduleEndStep(sched) == weftSuccess);
      EXPECT(weftShardScheduleGetState(sched, &len, &held, &most) == weftSuccess && held == 0 && most == 1);
      EXPECT(weftShardScheduleDestroy(sched) == weftSuccess);
      FAILS(weftShardScheduleDestroy(sched), weftInvalidArgument, "not a live handle");
    }
    EXPECT(weftShardGroupDestroy(group) == weftSuccess);
  }

  /* Copy plans: Create checks what weftFlatten/weftUnflatten check. */
  {
    weftCopyPlan_t plan = NULL;
    weftTensor_t t = {buf, 4, weftFloat32};
    float flat[4] = {0, 0, 0, 0};
    FAILS(weftFlattenPlanCreate(&t, 1, flat, weftFloat32, NULL, NULL), weftInvalidArgument, "plan is NULL");
    FAILS(weftFlattenPlanCreate(NULL, 1, flat, weftFloat32, NULL, &plan), weftInvalidArgument, "srcs is NULL with n = 1");
    FAILS(weftFlattenPlanCreate(&t, -1, flat, weftFloat32, NULL, &plan), weftInvalidArgument, "n = -1");
    FAILS(weftFlattenPlanCreate(&t, 1, flat, (weftDataType_t)42, NULL, &plan), weftInvalidArgument, "dst_dtype = 42");
    FAILS(weftFlattenPlanCreate(&t, 1, buf + 2, weftFloat32, NULL, &plan), weftInvalidArgument, "overlaps");
    FAILS(weftUnflattenPlanCreate(NULL, weftFloat32, NULL, &t, 1, 0, &plan), weftInvalidArgument, "src is NULL");
    EXPECT(plan == NULL);
    FAILS(weftCopyPlanExecute(NULL, 1.0f, NULL), weftInvalidArgument, "plan is NULL");
    FAILS(weftCopyPlanExecute((weftCopyPlan_t)(void*)buf, 1.0f, NULL), weftInvalidArgument, "not a live handle");
    FAILS(weftCopyPlanDestroy(NULL), weftInvalidArgument, "plan is NULL");
    EXPECT(weftFlattenPlanCreate(&t, 1, flat, weftFloat32, NULL, &plan) == weftSuccess && plan != NULL);
    FAILS(weftCopyPlanExecute(plan, 1.0f, (void*)flat), weftInvalidArgument, "not a live weft host stream");
    EXPECT(weftCopyPlanExecute(plan, 2.0f, NULL) == weftSuccess && flat[3] == 2.0f * buf[3]);
    EXPECT(weftCopyPlanDestroy(plan) == weftSuccess);
    FAILS(weftCopyPlanDestroy(plan), weftInvalidArgument, "not a live handle");
  }

  shard_group_sizes(comm);
  size_stamps(comm);
  kernel_sizes();
  enum_values(comm);

  /* After all of that the communicator still works. */
  EXPECT(weftAllReduce(buf, buf, 8, weftFloat32, weftSum, comm, NULL) == weftSuccess);
  EXPECT(buf[7] == 8.0f);
  EXPECT(weftCommGetBackend(comm, &backend) == weftSuccess);
  EXPECT(weftCommGetMemoryKind(comm, &memory) == weftSuccess && memory == weftMemoryHost);
  int cuda_device = 7;
  EXPECT(weftCommGetCudaDevice(comm, &cuda_device) == weftSuccess && cuda_device == -1);
  EXPECT(weftCommGetAsyncError(comm, &async) == weftSuccess && async == weftSuccess);
  EXPECT(weftCommDestroy(comm) == weftSuccess);

  if (failures) fprintf(stderr, "%d failures\n", failures);
  else printf("bad_args: all checks passed\n");
  return failures ? 1 : 0;
}
