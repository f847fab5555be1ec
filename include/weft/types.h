/*
 * weft/types.h: what every part of weft's C ABI shares: version macros,
 * result codes, element types, reduction ops, backends and memory kinds, the
 * communicator and host-stream handles, the tensor view the kernels, the
 * reducer and the shard groups take, and the error calls. Every other weft
 * header includes it; <weft/weft.h> includes them all.
 *
 * Conventions that hold for every entry point:
 *  - Every function returns a weftResult_t. On failure, weftGetLastError()
 *    returns a message naming the offending argument and its value. The
 *    message is thread-local: it describes the last failing call made by the
 *    calling thread, whatever other threads do.
 *  - No function aborts or exits the process, and no C++ exception crosses
 *    this ABI. A call refused for a bad argument changes nothing: the
 *    communicator (or reducer, or stream) stays usable.
 *  - Thread model: a communicator may be used from any thread, but calls that
 *    issue collectives on one communicator must not be made concurrently from
 *    several threads (as in NCCL); serialise them, or split the communicator.
 *    weftGetLastError, weftGetErrorString and weftGetVersion may be called from
 *    any thread at any time.
 *  - Streams. A `void* stream` argument means one of three things:
 *      NULL          blocking: the call returns when its result is in the
 *                    output buffers (CUDA memory: the legacy default stream);
 *      weftStream_t  a weft host stream (weft/stream.h): enqueued, returns at once;
 *      cudaStream_t  a CUDA stream: enqueued on it, as in NCCL; returns once enqueued.
 *    Which of them an entry point takes follows from the memory it works on:
 *      collectives, send/recv, groups    the communicator's memory kind:
 *                                        host: NULL or a weftStream_t; CUDA: a cudaStream_t
 *      kernels, weftCopyPlanExecute      the kind of the buffers (found, or
 *                                        stated with the Ex calls): as for collectives
 *      weftShardGroup* with a stream     the group's communicator's kind: as for collectives
 *      weftReducerMarkReady/Finalize     host: NULL only (the reducer has a stream of
 *                                        its own); CUDA: a cudaStream_t
 *      weftShardScheduleCreate           a weftStream_t or NULL (host memory)
 *      weftShardScheduleCreateCuda       a cudaStream_t or NULL (CUDA memory)
 *      weftStreamSynchronize/Query/Destroy  a weftStream_t, never NULL
 *    A stream of the wrong kind is refused with weftInvalidArgument naming
 *    `stream` wherever weft can tell: every live weftStream_t is registered,
 *    so a pointer that is not one (a cudaStream_t given where a host stream
 *    is expected, a destroyed stream, garbage) is refused without being
 *    dereferenced, and a weftStream_t given where a cudaStream_t is expected
 *    is refused too. A cudaStream_t cannot be told from other pointers
 *    without the CUDA runtime: one that is not a live stream is the CUDA
 *    runtime's error, as in NCCL.
 *  - Ordering. Collectives on one communicator execute in the order they were
 *    issued, across all streams, and every rank must issue the same
 *    collectives on a communicator in the same order (NCCL's rule). Host
 *    receives are ordered only behind the receives that could take their
 *    message (weftRecv).
 */
#ifndef WEFT_TYPES_H_
#define WEFT_TYPES_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */

#include "weft/version.h" /* WEFT_MAJOR, WEFT_MINOR, WEFT_PATCH: written by the build */
#define WEFT_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define WEFT_VERSION_CODE WEFT_VERSION(WEFT_MAJOR, WEFT_MINOR, WEFT_PATCH)

/* ---------------------------------------------------------------- types */

/* Result codes. The values are part of the ABI and never change. */
typedef enum {
  weftSuccess = 0,
  weftInvalidArgument = 1, /* an argument is NULL, out of range or inconsistent */
  weftInvalidUsage = 2,    /* the call is valid alone but not now: ranks disagree, wrong order, ... */
  weftUnsupported = 3,     /* this build or machine cannot do it (no GPU, backend not built, ...) */
  weftSystemError = 4,     /* a system call, the CUDA runtime, MPI, NCCL or UCX failed */
  weftInternalError = 5,   /* a bug in weft */
  weftRemoteError = 6,     /* another rank failed */
  weftTimeout = 7,         /* peers did not arrive within the communicator's timeout */
  weftAborted = 8,         /* the communicator was aborted */
  weftInProgress = 9,      /* asynchronous work is still running (not an error) */
  weftNumResults = 10
} weftResult_t;

/* Element types. The values are part of the ABI and never change: a type
 * added later is appended (weftInt16 came after weftInt64), and weftNumTypes
 * grows with it, so a caller must not store it. */
typedef enum {
  weftFloat32 = 0,
  weftFloat16 = 1,
  weftBfloat16 = 2,
  weftFloat64 = 3,
  weftInt8 = 4,
  weftUint8 = 5,
  weftInt32 = 6,
  weftInt64 = 7,
  weftInt16 = 8,
  weftNumTypes = 9
} weftDataType_t;

/* weftAvg is the sum divided by the number of ranks. Floating-point types
 * divide once, after the sum, in the accumulation type (float32 for float16
 * and bfloat16). Integer types sum in 64-bit wrapping arithmetic and divide
 * with truncation toward zero, then convert back (so int8 avg of 100 and 101
 * is 100, and of -3 and 0 is -1). */
typedef enum { weftSum = 0, weftProd = 1, weftMax = 2, weftMin = 3, weftAvg = 4, weftNumOps = 5 } weftRedOp_t;

typedef enum {
  weftBackendAuto = 0,      /* NCCL for CUDA memory; host: MPI under mpirun, else UCX (see weftCommInitWorld and
                             * weftCommInitStore) */
  weftBackendInProcess = 1, /* ranks are threads of this process */
  weftBackendMpi = 2,       /* host memory over MPI */
  weftBackendNccl = 3,      /* CUDA memory over NCCL */
  weftBackendUcx = 4,       /* host memory over UCX, on any launcher (weft's own bootstrap or MPI's) */
  weftNumBackends = 5
} weftBackend_t;

typedef enum { weftMemoryHost = 0, weftMemoryCuda = 1, weftNumMemoryKinds = 2 } weftMemoryKind_t;

typedef struct weftComm* weftComm_t;
typedef struct weftStream* weftStream_t;
/* Structs. Two kinds cross this ABI.
 *
 * Versioned structs are read by weft from its caller, and size-stamped:
 * weftConfig_t and weftStore_t (weft/comm.h), weftKernelConfig_t
 * (weft/kernels.h), weftReducerConfig_t (weft/reducer.h),
 * weftShardGroupConfig_t and weftShardScheduleConfig_t (weft/shard.h). Each begins with `size_t size`, which its _INITIALIZER
 * macro sets to sizeof the struct in the header the caller was compiled
 * against: always start from the initializer. Each is laid out without tail
 * padding (a `reserved` field fills what would be padding; the initializer
 * zeroes it and weft ignores it), so a field appended after the last one
 * always makes the struct larger, and a size names exactly one version of
 * it. Fields are only ever appended: never reordered, retyped, or put in a
 * reserved field's place. weft accepts exactly the sizes each struct has had
 * (listed at the struct), reads the fields the caller's version has and
 * defaults the rest; any other size, 0 included, is weftInvalidArgument
 * naming the struct, the size given and the sizes known.
 *
 * Plain structs carry no size and their layout never changes: weftTensor_t,
 * weftParamDesc_t and weftUniqueId (read from the caller, in arrays or by
 * value), and the output structs weft writes, weftShardDesc_t and
 * weftShardMemory_t.
 *
 * Enum-typed fields and arguments are C enums, which are int-sized (a 32-bit
 * signed int) on every ABI weft supports. Bind them as a 32-bit int, not as
 * the binding language's enum: weft reads the int and refuses a value
 * outside the enumerators, naming it. */

/* A flat view of one tensor: `count` elements of `dtype` at `data`. */
/* Plain (weft/types.h, "Structs"). */
typedef struct {
  void* data;
  size_t count;
  weftDataType_t dtype;
} weftTensor_t;

/* ---------------------------------------------------------------- errors */

/* WEFT_VERSION_CODE of the library actually loaded. Never fails for a non-NULL pointer. */
weftResult_t weftGetVersion(int* version);

/* A static description of `result`. Never NULL, also for out-of-range values. */
const char* weftGetErrorString(weftResult_t result);

/* The message of the last call on this thread that did not return
 * weftSuccess (or weftInProgress): which argument, which value, which rank.
 * "" if none failed yet. Valid until this thread's next weft call. */
const char* weftGetLastError(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_TYPES_H_ */
