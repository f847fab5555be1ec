/*
 * weft: the communication runtime under data-parallel and sharded training.
 *
 * This is weft's whole public C ABI: communicators, the four collectives DDP,
 * FSDP and ZeRO are built from, point-to-point and the rooted and all-to-all
 * collectives a framework's process group offers, host streams for asynchronous host
 * collectives, and the fused multi-tensor kernels. It is pure C99 and names no
 * CUDA, MPI or C++ type, so framework backends can include it from C, C++,
 * Rust or Python ctypes. The vocabulary follows NCCL's, which every framework
 * backend already speaks.
 *
 *   weftComm_t comm;
 *   weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;   // every default
 *   if (weftCommInitWorld(&comm, &cfg) != weftSuccess)
 *     fprintf(stderr, "weft: %s\n", weftGetLastError());
 *   weftAllReduce(grad, grad, n, weftFloat32, weftAvg, comm, NULL);  // blocks
 *   weftCommDestroy(comm);
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
 *  - Streams. For CUDA memory, `stream` is a cudaStream_t and the call is
 *    enqueued on it, exactly as in NCCL; the call returns once enqueued. For
 *    host memory, `stream` is NULL (the call blocks until its result is in the
 *    output buffers) or a weftStream_t from weftStreamCreate (the call is
 *    enqueued and returns at once; see "Host streams").
 *  - Ordering. Collectives on one communicator execute in the order they were
 *    issued, across all streams, and every rank must issue the same
 *    collectives on a communicator in the same order (NCCL's rule).
 */
#ifndef WEFT_WEFT_H_
#define WEFT_WEFT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */

#define WEFT_MAJOR 0
#define WEFT_MINOR 1
#define WEFT_PATCH 0
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

typedef enum {
  weftFloat32 = 0,
  weftFloat16 = 1,
  weftBfloat16 = 2,
  weftFloat64 = 3,
  weftInt8 = 4,
  weftUint8 = 5,
  weftInt32 = 6,
  weftInt64 = 7,
  weftNumTypes = 8
} weftDataType_t;

/* weftAvg is the sum divided by the number of ranks. Floating-point types
 * divide once, after the sum, in the accumulation type (float32 for float16
 * and bfloat16). Integer types sum in 64-bit wrapping arithmetic and divide
 * with truncation toward zero, then convert back (so int8 avg of 100 and 101
 * is 100, and of -3 and 0 is -1). */
typedef enum { weftSum = 0, weftProd = 1, weftMax = 2, weftMin = 3, weftAvg = 4, weftNumOps = 5 } weftRedOp_t;

typedef enum {
  weftBackendAuto = 0,      /* NCCL for CUDA memory; host: MPI under mpirun, else UCX (see weftCommInitWorld) */
  weftBackendInProcess = 1, /* ranks are threads of this process */
  weftBackendMpi = 2,       /* host memory over MPI */
  weftBackendNccl = 3,      /* CUDA memory over NCCL */
  weftBackendUcx = 4,       /* host memory over UCX, on any launcher (weft's own bootstrap or MPI's) */
  weftNumBackends = 5
} weftBackend_t;

typedef enum { weftMemoryHost = 0, weftMemoryCuda = 1, weftNumMemoryKinds = 2 } weftMemoryKind_t;

typedef struct weftComm* weftComm_t;
typedef struct weftStream* weftStream_t;

/* Extensible structs. Every struct weft reads from its caller begins with
 * `size_t size`, which the matching _INITIALIZER macro sets to the struct's
 * size in the header the caller was compiled against. Fields are only ever
 * appended, so weft reads the fields an older caller knows and defaults the
 * rest. Always start from the initializer; a size of 0 is refused. */
typedef struct {
  size_t size;
  weftBackend_t backend;    /* weftBackendAuto */
  weftMemoryKind_t memory;  /* weftMemoryHost */
  int timeout_ms;           /* host backends: wait for peers at most this long; 0: $WEFT_TIMEOUT_MS or 600000 */
  int cuda_device;          /* NCCL: device ordinal; -1: the local rank modulo the device count */
  size_t segment_bytes;     /* host backends: pipelining segment (on one node: shared-memory round);
                               0: $WEFT_SEGMENT_BYTES or the backend's choice */
  int bootstrap_timeout_ms; /* how long forming a world may take (every rank arriving at the bootstrap root);
                               0: $WEFT_BOOTSTRAP_TIMEOUT_MS or 300000 */
} weftConfig_t;

#define WEFT_CONFIG_INITIALIZER \
  { sizeof(weftConfig_t), weftBackendAuto, weftMemoryHost, 0, -1, 0, 0 }

/* Passing this as `color` to weftCommSplit leaves the caller out: *newcomm is NULL. */
#define WEFT_SPLIT_NOCOLOR (-1)

/* ---------------------------------------------------------------- errors */

/* WEFT_VERSION_CODE of the library actually loaded. Never fails for a non-NULL pointer. */
weftResult_t weftGetVersion(int* version);

/* A static description of `result`. Never NULL, also for out-of-range values. */
const char* weftGetErrorString(weftResult_t result);

/* The message of the last call on this thread that did not return
 * weftSuccess (or weftInProgress): which argument, which value, which rank.
 * "" if none failed yet. Valid until this thread's next weft call. */
const char* weftGetLastError(void);

/* ---------------------------------------------------------------- communicators */

/* Creates the world communicator from what launched the process. Collective:
 * every process of the job calls it. The world is found in this order
 * (WEFT_DEBUG=INFO logs which one and why):
 *  1. an MPI launcher (mpirun/mpiexec, srun with an MPI that speaks PMI): the
 *     world is MPI_COMM_WORLD. MPI is initialised if the application has not
 *     done so, and finalised by weft at process exit. Host memory runs on MPI
 *     (backend auto) or UCX; CUDA memory on NCCL, its unique id sent over MPI.
 *  2. torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; also
 *     set by Accelerate, Lightning, Ray Train and Kubernetes operators): rank 0
 *     serves weft's bootstrap at MASTER_ADDR, port $WEFT_MASTER_PORT or
 *     MASTER_PORT + 1 (never torch's own store port).
 *  3. Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST): the first
 *     node of the step serves it, port $WEFT_MASTER_PORT or one derived from
 *     the job and step ids.
 *  4. weft's own: WEFT_RANK, WEFT_WORLD_SIZE, WEFT_ROOT (host:port).
 *  5. none of these: a one-rank world.
 * Worlds 2-4 are made as weftCommInitRank makes them (host memory on UCX).
 * Variables that are present but unusable (a rank out of range, an
 * unreachable root, an MPI launcher and a libweft built without MPI) are an
 * error saying so: a job of several ranks never silently becomes several
 * one-rank worlds.
 * For CUDA memory the device chosen (config cuda_device, or the local rank
 * modulo the node's device count) is left current on the calling thread, as
 * an application's own cudaSetDevice would; weftCommGetCudaDevice reports it.
 * `config` may be NULL (every default). Blocking. */
weftResult_t weftCommInitWorld(weftComm_t* comm, const weftConfig_t* config);

/* Worlds without a launcher's help, as NCCL makes them: one process calls
 * weftGetUniqueId, the application moves the 128 bytes to every rank (over
 * its own channel: torch's Store, an MPI broadcast, a file), and every rank
 * calls weftCommInitRank with the same id and nranks and its own rank.
 *
 *   weftUniqueId id;
 *   if (rank == 0) weftGetUniqueId(&id);
 *   my_broadcast(&id, sizeof(id));                      // the application's channel
 *   weftCommInitRank(&comm, nranks, id, rank, NULL);
 *
 * The id names a bootstrap root: a listening socket in the process that made
 * it (its address is chosen as NCCL chooses one: $WEFT_SOCKET_IFNAME, a
 * comma-separated list of interface name prefixes, '^' to exclude and '=' for
 * exact names; else the first interface that is up and neither loopback nor a
 * docker bridge; else loopback; IPv4 and IPv6), and a random job tag that a
 * connecting rank must present. The root listens only while one world forms
 * (until every rank has joined and left it, or the bootstrap timeout), so an
 * id makes one communicator: make a new one for the next. */
#define WEFT_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[WEFT_UNIQUE_ID_BYTES];
} weftUniqueId;

/* Makes a unique id and starts its root in this process (a thread, which ends
 * by itself once its world has formed, failed or timed out). Any thread;
 * blocking only for the socket's set-up. */
weftResult_t weftGetUniqueId(weftUniqueId* id);

/* Creates rank `rank` of an `nranks`-rank world from a unique id. Collective:
 * returns once every rank has joined (or fails on every rank). Host memory
 * runs on UCX (config backend auto or UCX; weftBackendMpi is refused: MPI
 * worlds come from weftCommInitWorld), with shared-memory rounds among ranks
 * on one node; CUDA memory on NCCL. Failures are named: a rank that never
 * arrives within config bootstrap_timeout_ms makes every other rank fail with
 * weftTimeout, listing the missing ranks and the root's address; a rank with a
 * different nranks, a rank given twice or a rank outside [0, nranks) fails
 * every rank with weftInvalidUsage naming both. A failed init leaves no socket
 * or thread behind. Blocking. */
weftResult_t weftCommInitRank(weftComm_t* comm, int nranks, weftUniqueId id, int rank, const weftConfig_t* config);

/* A key-value store the framework already has (torch's c10d Store, JAX's
 * distributed client, etcd), which weftCommInitStore bootstraps through. The
 * callbacks may be called from the calling thread only, during the call. */
typedef struct {
  size_t size; /* set by WEFT_STORE_INITIALIZER */
  void* ctx;   /* passed back to set and get */
  /* Stores value[0, len) at key (overwriting); 0 on success. */
  int (*set)(void* ctx, const char* key, const void* value, size_t len);
  /* Blocks until the key exists (timeout_ms < 0: no limit), then copies its
   * value into value[0, cap) and its length into *len. 0 on success, non-zero
   * on a timeout, a value longer than cap, or any failure of the store. */
  int (*get)(void* ctx, const char* key, void* value, size_t cap, size_t* len, int timeout_ms);
} weftStore_t;

#define WEFT_STORE_INITIALIZER \
  { sizeof(weftStore_t), NULL, NULL, NULL }

/* weftCommInitRank, with the unique id moved through `store`: rank 0 makes it
 * and sets it under "<prefix>/weft/unique_id"; the other ranks get it (waiting
 * up to the bootstrap timeout). `prefix` (NULL: "") must be unique to this
 * communicator within the store, as torch's PrefixStore makes it for each
 * process group. Collective; blocking. */
weftResult_t weftCommInitStore(weftComm_t* comm, int nranks, int rank, const weftStore_t* store,
                               const char* prefix, const weftConfig_t* config);

/* Creates `nranks` communicators of one in-process world, ranks 0..nranks-1,
 * in comms[0..nranks-1] (NCCL's ncclCommInitAll). Rank i must then be driven
 * by its own thread: a collective returns when every rank has called it.
 * Host memory only. `config` may be NULL. Not collective; blocking. */
weftResult_t weftCommInitInProcess(weftComm_t* comms, int nranks, const weftConfig_t* config);

/* Splits `comm` by color; ranks are ordered by (key, old rank) in each new
 * communicator. Collective over `comm`; blocking. With WEFT_SPLIT_NOCOLOR the
 * caller takes part but gets *newcomm = NULL. The new communicator has the
 * parent's backend, memory kind and timeout. */
weftResult_t weftCommSplit(weftComm_t comm, int color, int key, weftComm_t* newcomm);

weftResult_t weftCommCount(weftComm_t comm, int* count);
weftResult_t weftCommUserRank(weftComm_t comm, int* rank);
/* The backend actually chosen (never weftBackendAuto) and the memory kind. */
weftResult_t weftCommGetBackend(weftComm_t comm, weftBackend_t* backend);
weftResult_t weftCommGetMemoryKind(weftComm_t comm, weftMemoryKind_t* memory);
/* The CUDA device a CUDA-memory communicator works on (the one chosen when
 * config cuda_device was -1), as ncclCommCuDevice; -1 for host memory. */
weftResult_t weftCommGetCudaDevice(weftComm_t comm, int* device);

/* The first error raised by asynchronous work on this communicator (a host
 * stream's collective, a NCCL kernel), or weftSuccess. Non-blocking; any thread. */
weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t* asyncError);

/* Marks the communicator aborted: collectives waiting on it return
 * weftAborted, and so do later ones. Local: does not wait for other ranks.
 * May be called from any thread, also while another thread is blocked in a
 * collective on `comm`. The communicator must still be destroyed. */
weftResult_t weftCommAbort(weftComm_t comm);

/* Frees the communicator. Waits for the collectives issued on it to finish
 * (or fail), so destroy host streams' work first or abort. Not collective. */
weftResult_t weftCommDestroy(weftComm_t comm);

/* ---------------------------------------------------------------- host streams */

/* A host stream is an in-order queue of weft work on host memory, run by a
 * thread of its own: the asynchronous form of the host collectives and
 * kernels, as a cudaStream_t is for device work. A call given a host stream
 * checks its arguments, enqueues the work and returns; the buffers must stay
 * valid and untouched until the stream is synchronised. Work on one stream
 * runs in enqueue order; collectives keep the communicator's issue order
 * whatever stream they are on. An asynchronous failure is reported by the
 * next weftStreamSynchronize/Query of that stream and by
 * weftCommGetAsyncError; work enqueued after a failure still runs. */
weftResult_t weftStreamCreate(weftStream_t* stream);
/* Blocks until everything enqueued so far has run. Returns the first error
 * since the last synchronisation, or weftSuccess. */
weftResult_t weftStreamSynchronize(weftStream_t stream);
/* weftSuccess when everything enqueued has run (and none failed since the
 * last synchronisation), weftInProgress when work is pending. Non-blocking. */
weftResult_t weftStreamQuery(weftStream_t stream);
/* Synchronises, then frees the stream. */
weftResult_t weftStreamDestroy(weftStream_t stream);

/* ---------------------------------------------------------------- collectives */

/* recvbuf[i] = op over ranks of sendbuf[i], for i < count. In place when
 * sendbuf == recvbuf. Floating-point results are bit-identical on every rank.
 * Collective; see "Streams" above for blocking and ordering. */
weftResult_t weftAllReduce(const void* sendbuf, void* recvbuf, size_t count, weftDataType_t dtype,
                           weftRedOp_t op, weftComm_t comm, void* stream);

/* sendbuf holds nranks * recvcount elements; rank r receives the reduction of
 * block r. In place when recvbuf == sendbuf + rank * recvcount elements. */
weftResult_t weftReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, weftDataType_t dtype,
                               weftRedOp_t op, weftComm_t comm, void* stream);

/* recvbuf holds nranks * sendcount elements; block r is rank r's sendbuf. In
 * place when sendbuf == recvbuf + rank * sendcount elements. */
weftResult_t weftAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, weftDataType_t dtype,
                           weftComm_t comm, void* stream);

/* recvbuf = root's sendbuf on every rank. sendbuf is only read on root (and
 * may be NULL elsewhere). In place when sendbuf == recvbuf. */
weftResult_t weftBroadcast(const void* sendbuf, void* recvbuf, size_t count, weftDataType_t dtype, int root,
                           weftComm_t comm, void* stream);

/* Blocks until every rank of `comm` has called it. Host backends only for now. */
weftResult_t weftBarrier(weftComm_t comm);

/* Point-to-point. weftSend sends `count` elements to rank `peer`, which
 * receives them with weftRecv of the same count and type from this rank.
 * Sends and receives between two ranks match in the order each issued them;
 * they keep the communicator's issue order with its collectives, and take
 * part in it on this rank only (no other rank need call anything). peer may
 * be the caller itself. count 0 moves nothing and matches nothing.
 *  - Host memory: a send is eager. It copies sendbuf and returns (stream
 *    NULL) or completes (host stream) without waiting for the receiver; weft
 *    delivers it in the background, so ranks that all send before they
 *    receive, with messages of any size, never deadlock, and sendbuf may be
 *    reused at once. A receive blocks (or, on a host stream, occupies the
 *    stream) until the message is in recvbuf, at most the communicator's
 *    timeout (weftTimeout naming the peer). A send that is never received
 *    fails with weftTimeout after the timeout, reported by
 *    weftCommGetAsyncError; weftCommDestroy waits for the sends made so far
 *    to be received (abort first to drop them). On the in-process backend a
 *    receive whose count or type differs from the send's is weftInvalidUsage
 *    naming both; elsewhere a mismatch is undefined, as in NCCL.
 *  - CUDA memory (NCCL): ncclSend/ncclRecv, enqueued on `stream`. As in NCCL,
 *    a send waits on the device for its receive: ranks that send to each
 *    other must issue those calls inside one weftGroupStart/weftGroupEnd. */
weftResult_t weftSend(const void* sendbuf, size_t count, weftDataType_t dtype, int peer, weftComm_t comm,
                      void* stream);
weftResult_t weftRecv(void* recvbuf, size_t count, weftDataType_t dtype, int peer, weftComm_t comm, void* stream);

/* recvbuf[i] on root = op over ranks of sendbuf[i], for i < count; recvbuf is
 * only written (and read) on root and may be NULL elsewhere. In place on root
 * when sendbuf == recvbuf. Host memory: the same inputs give the same bits on
 * every run (each element combined in an order fixed by the count and the
 * ranks, never by timing). Collective; see "Streams" above. */
weftResult_t weftReduce(const void* sendbuf, void* recvbuf, size_t count, weftDataType_t dtype, weftRedOp_t op,
                        int root, weftComm_t comm, void* stream);

/* On root, block r of recvbuf (nranks * sendcount elements) is rank r's
 * sendbuf; recvbuf is only used on root. In place when root's sendbuf ==
 * recvbuf + root * sendcount elements. Collective. */
weftResult_t weftGather(const void* sendbuf, void* recvbuf, size_t sendcount, weftDataType_t dtype, int root,
                        weftComm_t comm, void* stream);

/* Rank r's recvbuf = block r of root's sendbuf (nranks * recvcount
 * elements); sendbuf is only read on root. In place when root's recvbuf ==
 * sendbuf + root * recvcount elements. Collective. */
weftResult_t weftScatter(const void* sendbuf, void* recvbuf, size_t recvcount, weftDataType_t dtype, int root,
                         weftComm_t comm, void* stream);

/* Block q of sendbuf (count elements per peer) goes to rank q, which receives
 * it as block r (this rank) of its recvbuf; both hold nranks * count
 * elements. Never in place: the buffers must not overlap. Collective. */
weftResult_t weftAllToAll(const void* sendbuf, void* recvbuf, size_t count, weftDataType_t dtype, weftComm_t comm,
                          void* stream);

/* The uneven all-to-all (torch's all_to_all_single with split sizes, and
 * all_to_all of lists): sendcounts[q] elements at sendbuf + sdispls[q] go to
 * rank q, which receives them at its recvbuf + rdispls[r] as recvcounts[r]
 * elements, which must equal them. Counts and displacements are in elements,
 * nranks of each; they are read before the call returns. The blocks of one
 * buffer must not overlap, nor the two buffers. On the in-process backend
 * ranks whose counts disagree all fail with weftInvalidUsage naming both.
 * Collective. */
weftResult_t weftAllToAllv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                           const size_t* recvcounts, const size_t* rdispls, weftDataType_t dtype, weftComm_t comm,
                           void* stream);

/* Groups, as ncclGroupStart/ncclGroupEnd; per thread, and they nest (the
 * outermost weftGroupEnd ends the group). Calls made inside a group are
 * checked at once (a refused call returns its error there and joins
 * nothing) and take effect at weftGroupEnd:
 *  - CUDA memory: they go to NCCL inside ncclGroupStart/ncclGroupEnd, which
 *    fuses them; required for sends and receives between ranks that send to
 *    each other (torch's batch_isend_irecv).
 *  - host memory: weftGroupEnd issues the group's sends first, then its other
 *    calls in the order they were made, and returns the first error (calls
 *    after it are not issued, and it says how many). With stream NULL it
 *    blocks until they have run; on host streams they are enqueued there.
 * weftCommSplit inside a group is weftInvalidUsage; do not destroy a
 * communicator that has calls in an open group. weftGroupEnd without a
 * weftGroupStart is weftInvalidUsage. */
weftResult_t weftGroupStart(void);
weftResult_t weftGroupEnd(void);

/* ---------------------------------------------------------------- kernels */

/* Fused multi-tensor kernels: what DDP and FSDP do between collectives
 * (packing gradients into a bucket, casting and scaling on the way, copying
 * reduced buckets back, AMP unscaling, gradient-norm clipping), as one call
 * for many tensors.
 *
 * Arithmetic: the product is computed in float32 (float64 when either side is
 * float64) and rounded once to the destination type, round-to-nearest-even,
 * so float32 results equal PyTorch's .to(torch.bfloat16) / .to(torch.float16)
 * bit for bit; overflow becomes inf, subnormals are kept, NaN stays NaN
 * (which NaN is unspecified). With accumulation the old value is added in the
 * same type before the one rounding. A same-type copy with scale 1 moves the
 * bits unchanged.
 *
 * Memory: every pointer of a call is host memory, or every one is CUDA
 * memory (found from the pointers; managed memory counts as either). For
 * CUDA memory `stream` is a cudaStream_t, the call is enqueued on it and
 * returns, and found_inf, norms and total are device pointers (an optimizer
 * can read them without a host synchronisation). For host memory `stream` is
 * NULL (the call returns when done) or a weftStream_t (enqueued). The
 * tensor lists and offsets are read before the call returns; only the buffers
 * must stay valid until the work has run. Sources and destinations must not
 * overlap. Any thread may call these; they touch no
 * communicator. Errors (weftInvalidArgument) name the argument and value. */

/* A flat view of one tensor: `count` elements of `dtype` at `data`. */
typedef struct {
  void* data;
  size_t count;
  weftDataType_t dtype;
} weftTensor_t;

/* dst[offsets[i] + j] = convert(dst_dtype, scale * srcs[i][j]) for every
 * tensor i < n and element j. offsets == NULL packs the tensors back to back.
 * dtypes: float32, float16, bfloat16, float64, in any pair. */
weftResult_t weftFlatten(const weftTensor_t* srcs, int n, void* dst, weftDataType_t dst_dtype,
                         const size_t* offsets, float scale, void* stream);

/* dsts[i][j] = convert(dsts[i].dtype, scale * src[offsets[i] + j]), added to
 * the old value when accumulate != 0. offsets == NULL: packed back to back. */
weftResult_t weftUnflatten(const void* src, weftDataType_t src_dtype, const size_t* offsets,
                           const weftTensor_t* dsts, int n, float scale, int accumulate, void* stream);

/* Every element *= inv_scale in place (float32, float16, bfloat16); *found_inf
 * = 1 if any result is inf or NaN, left unchanged otherwise, so one flag can
 * collect several calls (torch's GradScaler). */
weftResult_t weftUnscaleCheckFinite(const weftTensor_t* tensors, int n, float inv_scale, int* found_inf,
                                    void* stream);

/* L2 norm of each tensor (norms[i]; norms may be NULL) and of all of them
 * together (*total), accumulated in float64 with a fixed blocking: the same
 * bits on every run and thread count. float32, float16, bfloat16. */
weftResult_t weftL2Norm(const weftTensor_t* tensors, int n, float* norms, float* total, void* stream);

/* FSDP2's chunk_cat, the input layout of a reduce-scatter: rank r's slab of
 * dst holds chunk r of every tensor, consecutively, zero-padded. With
 * chunk[i] = chunk_counts ? chunk_counts[i] : ceil(srcs[i].count / world) and
 * S = chunk[0] + ... + chunk[n-1], dst holds world * S elements and
 * dst[r*S + chunk[0] + ... + chunk[i-1] + k] = convert(dst_dtype, scale * srcs[i][r*chunk[i] + k]),
 * or +0 past the end of srcs[i]. */
weftResult_t weftChunkCat(const weftTensor_t* srcs, int n, int world, const size_t* chunk_counts, void* dst,
                          weftDataType_t dst_dtype, float scale, void* stream);

/* The inverse: the copy-out of an all-gather of such slabs into full tensors,
 * dsts[i][r*chunk[i] + k] = convert(dsts[i].dtype, scale * src[r*S + ... + k])
 * (added to the old value when accumulate != 0); padding is not read. */
weftResult_t weftChunkSplit(const void* src, weftDataType_t src_dtype, int world, const size_t* chunk_counts,
                            const weftTensor_t* dsts, int n, float scale, int accumulate, void* stream);

/* Copy plans: a flatten or unflatten of a fixed tensor list, checked once and
 * executed many times (a DDP bucket's fill and copy-out, every step). Create
 * takes the arguments of weftFlatten / weftUnflatten less scale and stream,
 * makes every check those make (and fails the same way), and prepares the
 * work; Execute then checks only the plan and the stream, and writes exactly
 * what the one-shot call with the same arguments and scale writes. The
 * tensor list and offsets are read during Create only; the buffers (srcs[i].data
 * and dst, or src and dsts[i].data) must stay allocated at the same addresses
 * until the plan is destroyed, and their contents may change between runs.
 *
 *   weftCopyPlan_t fill;
 *   weftFlattenPlanCreate(grads, n, bucket, weftBfloat16, NULL, &fill);   // once
 *   weftCopyPlanExecute(fill, 1.0f / world, NULL);                       // every step
 *   weftCopyPlanDestroy(fill);
 *
 * Create and Destroy are blocking and local. Execute has the stream semantics
 * of weftFlatten: NULL blocks, a weftStream_t enqueues (the plan may be
 * destroyed while that work is pending: it keeps what it needs), a
 * cudaStream_t for CUDA memory enqueues there. Any thread may execute a plan,
 * also concurrently with itself when its destinations may be written so.
 * On CUDA memory, Create also uploads the plan's launch table to device memory
 * (it synchronises: not during a graph capture); Execute is then one kernel
 * launch per source/destination dtype pair and nothing else, so it may be
 * captured in a CUDA graph; Destroy waits for the device before freeing the
 * table (not during a capture, nor while a graph holding an Execute may still
 * be launched). */
typedef struct weftCopyPlan* weftCopyPlan_t;

weftResult_t weftFlattenPlanCreate(const weftTensor_t* srcs, int n, void* dst, weftDataType_t dst_dtype,
                                   const size_t* offsets, weftCopyPlan_t* plan);
/* accumulate != 0: every execution adds into dsts, as weftUnflatten does. */
weftResult_t weftUnflattenPlanCreate(const void* src, weftDataType_t src_dtype, const size_t* offsets,
                                     const weftTensor_t* dsts, int n, int accumulate, weftCopyPlan_t* plan);
weftResult_t weftCopyPlanExecute(weftCopyPlan_t plan, float scale, void* stream);
weftResult_t weftCopyPlanDestroy(weftCopyPlan_t plan);

/* ---------------------------------------------------------------- DDP reducer */

/* The reducer all-reduces gradients in buckets while backward is still
 * computing (PyTorch DDP's Reducer, Horovod's tensor fusion). Register the
 * gradients once; in each backward call weftReducerMarkReady as each
 * gradient is produced, then weftReducerFinalize; every gradient then holds
 * its average over the ranks.
 *
 *   weftReducerConfig_t cfg = WEFT_REDUCER_CONFIG_INITIALIZER;
 *   weftReducer_t red;
 *   weftReducerCreate(comm, grads, n, &cfg, &red);       // collective
 *   for (;;) {
 *     ... backward: weftReducerMarkReady(red, i, grad_i, NULL) per gradient ...
 *     weftReducerFinalize(red, NULL);                     // averages in place
 *   }
 *   weftReducerDestroy(red);
 *
 * Buckets are launched strictly in bucket order on every rank, whatever order
 * the gradients arrive in, so ranks never deadlock. The reducer issues
 * collectives on `comm` from its own stream between the first MarkReady of a
 * backward and the return of Finalize: issue nothing else on `comm` then.
 *
 * Host-memory communicators: the reducer's stream is a host thread; pass
 * NULL streams; Finalize blocks until the averages are written.
 * CUDA communicators (NCCL): gradients are device memory and the streams are
 * cudaStream_t (NULL: the legacy default stream). The reducer has its own
 * communication stream on the communicator's device (config cuda_device of
 * the communicator, or the device current at weftReducerCreate), ordered by
 * events, never by a device-wide synchronisation: a bucket's copy-in, NCCL
 * all-reduce and copy-out start after the work enqueued on the streams its
 * gradients were marked on, and Finalize(stream) makes `stream` wait for the
 * last copy-out without blocking the host (except in find_unused mode,
 * where the host waits for the used-bitmap, and at the one bucket rebuild).
 * Bucket memory comes from the device's stream-ordered pool and is returned
 * at weftReducerDestroy. */
typedef struct weftReducer* weftReducer_t;

/* Pass as comm_dtype to communicate in the gradients' own type. */
#define WEFT_REDUCER_COMM_DTYPE_NATIVE (-1)

typedef struct {
  size_t size;                    /* set by the initializer */
  size_t bucket_cap_bytes;        /* 25 MiB */
  size_t first_bucket_cap_bytes;  /* 1 MiB: the first bucket is small so communication starts early */
  int comm_dtype;                 /* WEFT_REDUCER_COMM_DTYPE_NATIVE, weftBfloat16 or weftFloat16 (compression:
                                     cast in the copy-in, back in the copy-out; float16 divides by sqrt(N)
                                     before and after the sum so it cannot overflow) */
  int find_unused;                /* 0; 1: gradients not marked by Finalize are unused (zeros), and a used-bitmap
                                     is all-reduced: weftReducerGetGradUsed */
  int static_graph;               /* 0; 1: the first backward's mark counts are expected in every backward
                                     (activation checkpointing marks a gradient once per recomputation) */
  int rebuild_buckets;            /* 1: after the first backward, re-plan once from rank 0's ready order */
  int gradient_as_bucket_view;    /* 0; 1: the framework makes each gradient a view of its bucket slot
                                     (weftReducerGetGradSlot), so nothing is copied in or out */
  const char* const* names;       /* NULL, or names[i] of grads[i], used in error messages; copied */
} weftReducerConfig_t;

#define WEFT_REDUCER_CONFIG_INITIALIZER \
  { sizeof(weftReducerConfig_t), (size_t)25 << 20, (size_t)1 << 20, WEFT_REDUCER_COMM_DTYPE_NATIVE, 0, 0, 1, 0, NULL }

/* Registers grads[0..n-1] (count and dtype; data is not read). Collective
 * over `comm`; blocking. Every rank's gradient list and configuration are
 * compared first: a difference is weftInvalidUsage on every rank, naming the
 * first differing gradient and the ranks that disagree (never a hang).
 * `config` may be NULL. `comm` must outlive the reducer. */
weftResult_t weftReducerCreate(weftComm_t comm, const weftTensor_t* grads, int n,
                               const weftReducerConfig_t* config, weftReducer_t* reducer);

/* Gradient `index` is final for this backward and lives at `grad` (count
 * elements of its registered dtype), which must stay valid and unchanged
 * until Finalize returns, and is not to be read before then (host memory:
 * parts of it may be averaged in place, as a bucket view is). Any thread, any order; does not block on the
 * communication: a completed bucket is copied in and all-reduced on the
 * reducer's stream. Host memory: `stream` must be NULL. CUDA memory: the
 * cudaStream_t `grad` is produced on; the reducer reads `grad` only after
 * the work enqueued there before the call. Marking a gradient
 * twice in one backward is weftInvalidUsage naming it (unless static_graph
 * expects it); `grad` inside the reducer's buckets other than its own slot
 * is weftInvalidArgument; a refused call changes nothing. Each gradient
 * needs memory of its own: gradients that overlap are reported by Finalize
 * (weftInvalidArgument naming them) when their copies or reductions would
 * collide, and that rank's share of their bucket is then undefined on every
 * rank for this backward. */
weftResult_t weftReducerMarkReady(weftReducer_t reducer, int index, void* grad, void* stream);

/* Gradient `index` takes no part in this backward: its slot is zero-filled
 * and counts as ready. Any thread. CUDA, gradient_as_bucket_view: the slot
 * is zeroed after the work on the stream last passed to MarkReady or
 * Finalize. */
weftResult_t weftReducerMarkUnused(weftReducer_t reducer, int index);

/* Waits for every bucket: every grad passed to MarkReady now holds the
 * average over ranks. Collective (the buckets' all-reduces); blocking.
 * Outside find_unused mode, gradients never marked make it return
 * weftInvalidUsage listing them (by name when known) and change nothing: mark
 * them and call it again. Host memory: `stream` must be NULL. CUDA memory:
 * returns without waiting for the device (but see find_unused above); work
 * enqueued on `stream` after the call sees the averages. */
weftResult_t weftReducerFinalize(weftReducer_t reducer, void* stream);

/* 0: accumulate locally (no_sync): MarkReady and Finalize communicate
 * nothing, and the next synced backward reduces the accumulated gradients.
 * Refused (weftInvalidUsage) in the middle of a backward. */
weftResult_t weftReducerSetSync(weftReducer_t reducer, int sync);

/* Waits for launched work (CUDA: the reducer's own stream only), then frees
 * the reducer and its bucket memory. Not collective. CUDA with
 * gradient_as_bucket_view: the buckets are freed after the work enqueued so
 * far on the stream last passed to MarkReady or Finalize, which may still
 * read the gradient views, and Destroy waits for that work too; the views
 * are invalid after. */
weftResult_t weftReducerDestroy(weftReducer_t reducer);

/* Gradient-as-bucket-view. *slot: where gradient `index` lives in its bucket
 * (count elements of the bucket's type, the comm dtype), valid until the
 * layout version changes; *bucket: its bucket number. Make the framework's
 * gradient a view of it and pass that pointer to MarkReady. */
weftResult_t weftReducerGetGradSlot(weftReducer_t reducer, int index, void** slot, int* bucket);
weftResult_t weftReducerGetBucketCount(weftReducer_t reducer, int* count);
/* Incremented when the buckets are rebuilt (after the first backward): re-fetch the slots then. */
weftResult_t weftReducerGetLayoutVersion(weftReducer_t reducer, int* version);
/* find_unused: after Finalize, *used = 1 when some rank used gradient `index`
 * in that backward. A gradient unused here but used elsewhere holds its
 * average only in its slot; one unused everywhere is left untouched. */
weftResult_t weftReducerGetGradUsed(weftReducer_t reducer, int index, int* used);

/* ---------------------------------------------------------------- sharding (FSDP, ZeRO) */

/* A shard group is a set of parameters gathered and released together (a
 * transformer block, an FSDP unit). Each rank keeps its fp32 master shard and
 * fp32 gradient shard of the group; weft gathers full parameters in the
 * compute dtype just before use and reduce-scatters full gradients into the
 * gradient shard after. ZeRO-1/2/3 and HSDP are configurations of it:
 *   ZeRO-3 / FSDP  unshard before each use, reshard after, reduce-scatter;
 *   ZeRO-2         keep parameters unsharded, reduce-scatter gradients;
 *   ZeRO-1         reduction = weftGradAllReduce (every rank gets the full
 *                  average and keeps its shard of it);
 *   HSDP           pass `replicas` (weftCommSplit): reduce-scatter within
 *                  `comm`, then all-reduce the shard across replicas.
 * Memory follows the communicator (weftCommGetMemoryKind). Host memory:
 * `stream` is NULL (blocks) or a weftStream_t (enqueued). CUDA memory (the
 * NCCL backend): the shards live on the communicator's device, `stream` is a
 * cudaStream_t (NULL: the legacy default stream) on which the cast-copy
 * kernels and the NCCL collectives are enqueued; such calls return once
 * enqueued, never synchronise the device and never wait on the host. A
 * stream of the wrong kind is weftInvalidArgument naming `stream`. The calls
 * documented as blocking run on a stream of the group's own and wait for it
 * alone; their full tensors may be host memory (checkpoints) or device memory.
 * Unsharded buffers come from a pool kept per communicator (CUDA: the
 * device's stream-ordered allocator, cudaMallocAsync), so the next group's
 * unshard reuses the last one's memory. The communicators must outlive their
 * groups. */
typedef struct weftShardGroup* weftShardGroup_t;

typedef enum {
  weftShardFlat = 0,     /* FSDP1 / ZeRO-3: concatenated, padded, one contiguous slice per rank */
  weftShardPerParam = 1, /* FSDP2: every parameter chunked along dim 0, each shard a valid tensor */
  weftNumShardLayouts = 2
} weftShardLayout_t;

typedef enum { weftGradReduceScatter = 0, weftGradAllReduce = 1, weftNumGradReductions = 2 } weftGradReduction_t;

#define WEFT_MAX_DIMS 8

typedef struct {
  const char* name;               /* for error messages; may be NULL */
  int ndim;                       /* 0 (a scalar) .. WEFT_MAX_DIMS */
  int64_t shape[WEFT_MAX_DIMS];
} weftParamDesc_t;

typedef struct {
  size_t size;
  weftShardLayout_t layout;       /* weftShardFlat */
  weftDataType_t param_dtype;     /* weftFloat32: unsharded (compute) parameters; or bfloat16, float16 */
  weftDataType_t reduce_dtype;    /* weftFloat32: the gradient collective; or bfloat16, float16 */
  weftGradReduction_t reduction;  /* weftGradReduceScatter */
} weftShardGroupConfig_t;

#define WEFT_SHARD_GROUP_CONFIG_INITIALIZER \
  { sizeof(weftShardGroupConfig_t), weftShardFlat, weftFloat32, weftFloat32, weftGradReduceScatter }

/* This rank's part of one parameter: elements [param_offset, param_offset +
 * length) of the flattened parameter, at shard_offset in the shard buffers. */
typedef struct {
  size_t param_offset;
  size_t length;
  size_t shard_offset;
} weftShardDesc_t;

typedef struct {
  size_t shard_bytes;        /* this group's fp32 master shard */
  size_t grad_shard_bytes;   /* this group's fp32 gradient shard */
  size_t unsharded_bytes;    /* this group's live unsharded buffers (0 after reshard) */
  size_t pool_live_bytes;    /* the communicator's pool: handed out */
  size_t pool_cached_bytes;  /* the communicator's pool: kept for reuse */
  size_t pool_peak_bytes;    /* the communicator's pool: most ever handed out at once */
} weftShardMemory_t;

/* Collective over comm (blocking): every rank passes the same parameter list,
 * else weftInvalidUsage on every rank. replicas may be NULL. */
weftResult_t weftShardGroupCreate(weftComm_t comm, weftComm_t replicas, const weftParamDesc_t* params, int n,
                                  const weftShardGroupConfig_t* config, weftShardGroup_t* group);
/* Local. Synchronise the streams the group's work ran on first. */
weftResult_t weftShardGroupDestroy(weftShardGroup_t group);
/* Local, non-blocking. */
weftResult_t weftShardGroupGetShard(weftShardGroup_t group, int param, weftShardDesc_t* desc);
/* The fp32 master and gradient shards (count elements each, padding included):
 * an optimizer updates them in place. On a CUDA group these are device
 * pointers (on the communicator's device). Local. */
weftResult_t weftShardGroupGetBuffers(weftShardGroup_t group, float** params, float** grads, size_t* count);
/* Copies this rank's part of each full fp32 parameter (host memory, or the
 * group's device) into the master shard. Local, blocking. */
weftResult_t weftShardGroupLoadFull(weftShardGroup_t group, const float* const* full, int n);
/* All-gathers the master shards, cast once to param_dtype. Collective over
 * comm. Host: NULL stream blocks; a weftStream_t: enqueued (synchronise
 * before reading the full parameters). CUDA: enqueued on the cudaStream_t;
 * work enqueued after it on that stream sees the full parameters. */
weftResult_t weftShardGroupUnshard(weftShardGroup_t group, void* stream);
/* Unshards into the caller's buffer `full` of *numel elements of
 * param_dtype (weftShardGroupGetFullLayout), for frameworks that own the
 * memory of full parameters (PyTorch keeps autograd's saved tensors pointing
 * at it across reshards). Parameter i starts at element offsets[i]. Does not
 * mark the group unsharded. Collective; stream as for Unshard. */
weftResult_t weftShardGroupUnshardInto(weftShardGroup_t group, void* full, void* stream);
/* *numel: the element count UnshardInto needs; offsets (may be NULL): n
 * entries, where each parameter starts in it. Local. */
weftResult_t weftShardGroupGetFullLayout(weftShardGroup_t group, size_t* numel, size_t* offsets, int n);
/* Parameter `param`'s full values (param_dtype), valid from Unshard's
 * completion until Reshard. Local. */
weftResult_t weftShardGroupGetFullParam(weftShardGroup_t group, int param, void** data);
/* Returns the unsharded buffers to the pool. Local; synchronise first (CUDA:
 * the streams that gathered or read them; the memory goes back to the
 * device's allocator on the legacy default stream). */
weftResult_t weftShardGroupReshard(weftShardGroup_t group);
/* grads[i] is parameter i's full gradient (numel elements, any float dtype):
 * cast to reduce_dtype, reduce-scattered (or all-reduced) with averaging,
 * all-reduced across replicas, added to the fp32 gradient shard. Collective;
 * stream as for Unshard. */
weftResult_t weftShardGroupReduceGrads(weftShardGroup_t group, const weftTensor_t* grads, int n, void* stream);
/* The same from gradients already laid out as the unsharded buffer (flat
 * layout; *numel elements of reduce_dtype at offsets[i], as
 * weftShardGroupGetFullLayout gives): reduced in place, no packed copy. The
 * padding is zeroed by weft. Collective; stream as for Unshard. */
weftResult_t weftShardGroupReduceGradsFlat(weftShardGroup_t group, void* grads, weftDataType_t dtype, void* stream);
/* Sets the gradient shard to zero. Local, blocking (synchronise the streams
 * the reductions ran on first). */
weftResult_t weftShardGroupZeroGrads(weftShardGroup_t group);
/* Full fp32 parameters from the shards: out[i] (numel floats) written on
 * root, or on every rank when root < 0. On a CUDA group the out[i] may be
 * host or device memory (all on one side). Collective, blocking;
 * materialises one group. */
weftResult_t weftShardGroupGatherFull(weftShardGroup_t group, int root, float* const* out, int n);
/* Inverse: root's full[i] become every rank's shards (full is only read on
 * root; host or device memory as for GatherFull). Collective, blocking. */
weftResult_t weftShardGroupScatterFull(weftShardGroup_t group, int root, const float* const* full, int n);
weftResult_t weftShardGroupGetMemory(weftShardGroup_t group, weftShardMemory_t* memory);

/* Optimizer state shaped like the master shard (AdamW's exp_avg and
 * exp_avg_sq: `shard`, count elements as weftShardGroupGetBuffers gives) to
 * and from full per-parameter tensors, as GatherFull and ScatterFull do for
 * the master: one group materialised at a time. GatherFullFrom: out[i] written
 * on root, or on every rank when root < 0; collective, blocking.
 * ScatterFullInto: root's full[i] become every rank's `shard` (full is only
 * read on root); collective, blocking; a refusal on root leaves every rank's
 * shard unchanged. */
weftResult_t weftShardGroupGatherFullFrom(weftShardGroup_t group, const float* shard, int root, float* const* out,
                                          int n);
weftResult_t weftShardGroupScatterFullInto(weftShardGroup_t group, int root, const float* const* full, int n,
                                           float* shard);

/* ---------------------------------------------------------------- shard schedule (prefetch) */

/* A schedule drives a model's shard groups through training steps: it
 * gathers each group before its forward and its backward, starts the next
 * group's all-gather while the caller computes the current one (forward:
 * the next group in order; backward: the previous one), releases groups
 * after use (ZeRO-3) and reduces gradients on its stream. At most two groups
 * are gathered at once (the one in use and the one prefetched), which keeps
 * peak memory near the shards plus the two largest groups.
 *
 * The order is declared with weftShardScheduleDeclareOrder, or recorded from
 * the PreForward calls of the first step; prefetching starts once it is
 * known. Backward is the reverse order.
 *
 *   weftShardScheduleConfig_t cfg = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
 *   weftShardSchedule_t s;
 *   weftShardScheduleCreate(stream, &cfg, &s);
 *   for (;;) {
 *     weftShardScheduleBeginStep(s);
 *     for g in order:    PreForward(s, g); forward of g; PostForward(s, g);
 *     for g in reverse:  PreBackward(s, g); backward of g; PostBackward(s, g, grads, n);
 *     weftShardScheduleEndStep(s);   // gradient shards complete
 *     optimizer step on the master shards
 *   }
 *   weftShardScheduleDestroy(s);
 *
 * Full parameters are gathered into weft's pool (read them with
 * weftShardGroupGetFullParam between PreForward/PreBackward and the matching
 * Post call), or into memory the framework owns: set `acquire` and `release`.
 * acquire(user, group, bytes) returns `bytes` of memory for the group's full
 * parameters (the weftShardGroupGetFullLayout layout in param_dtype, as for
 * weftShardGroupUnshardInto), or NULL to fail the call (weftSystemError);
 * release(user, group, full) hands it back once the gather into it has run.
 * Both are called on the thread calling the schedule, inside its calls,
 * never on the stream's thread.
 *
 * CUDA memory (config memory = weftMemoryCuda): `stream` is the
 * cudaStream_t the framework computes on (cast: (weftStream_t)s; NULL: the
 * legacy default stream). The schedule enqueues its gathers and reductions
 * on a stream of its own on the groups' device; "returns when gathered"
 * becomes "the caller's stream waits for the gather" (an event: the host does
 * not wait); the schedule's stream waits for the caller's before it gathers
 * shards the optimizer updated (BeginStep), reduces gradients (PostBackward)
 * or reuses memory the caller read; EndStep makes the caller's stream wait
 * for the step's reductions and returns the first async error the groups'
 * communicators have reported (weftCommGetAsyncError's). A reduced gradient buffer goes back to the
 * device's allocator on the schedule's stream, where the next prefetched
 * gather reuses it.
 *
 * Every rank must make the same calls in the same order (the all-gathers
 * and reductions are collectives). A schedule is used from one thread. While
 * a step is open the schedule issues collectives on the groups'
 * communicators from its stream; issue others there only between steps.
 * Destroy the schedule before its groups. A call refused for a bad argument
 * or a call out of order changes nothing. */
typedef struct weftShardSchedule* weftShardSchedule_t;

typedef void* (*weftShardAcquireFn)(void* user, weftShardGroup_t group, size_t bytes);
typedef void (*weftShardReleaseFn)(void* user, weftShardGroup_t group, void* full);

typedef struct {
  size_t size;
  int reshard_after_forward;  /* 1: ZeRO-3 / FSDP, release each group after its forward and backward;
                                 0: ZeRO-1/2, keep groups gathered until the next BeginStep */
  int prefetch;               /* 1; 0: gather each group only when it is needed */
  weftShardAcquireFn acquire; /* NULL: weft's pool; else acquire and release are both set */
  weftShardReleaseFn release;
  void* user;                 /* passed to acquire and release */
  weftMemoryKind_t memory;    /* weftMemoryHost: groups on host memory, `stream` a weftStream_t;
                                 weftMemoryCuda: groups on CUDA memory, `stream` a cudaStream_t */
} weftShardScheduleConfig_t;

#define WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER \
  { sizeof(weftShardScheduleConfig_t), 1, 1, NULL, NULL, NULL, weftMemoryHost }

/* Host memory: `stream` is the weftStream_t the gathers and reductions are
 * enqueued on; NULL: a stream of the schedule's own. CUDA memory: the
 * caller's cudaStream_t (see above); a weftStream_t is refused. `config` may
 * be NULL. Local. */
weftResult_t weftShardScheduleCreate(weftStream_t stream, const weftShardScheduleConfig_t* config,
                                     weftShardSchedule_t* schedule);
/* Waits for its stream (unless that was destroyed already), returns acquired
 * buffers through release. Groups gathered into the pool stay gathered until
 * weftShardGroupReshard. Local. */
weftResult_t weftShardScheduleDestroy(weftShardSchedule_t schedule);
/* The forward order of groups[0..n-1] (distinct, live). Between steps only. Local. */
weftResult_t weftShardScheduleDeclareOrder(weftShardSchedule_t schedule, const weftShardGroup_t* groups, int n);
/* Whether `group` is released after its forward (reshard 1) or kept gathered
 * until its backward is done (0), overriding the config's
 * reshard_after_forward for this group. FSDP keeps its root this way: a
 * language model's embeddings are used first in the forward and last in the
 * backward, and releasing them after the forward only means gathering them
 * again for the backward, where nothing is left to hide that gather behind.
 * A kept group holds its memory from its forward to its backward, beside the
 * two groups the schedule has gathered around the one in use. Between steps
 * only. Local. */
weftResult_t weftShardScheduleSetReshardAfterForward(weftShardSchedule_t schedule, weftShardGroup_t group,
                                                     int reshard);
/* Opens a step. ZeRO-1/2: releases the groups kept gathered, whose shards
 * the optimizer has updated since. Local. */
weftResult_t weftShardScheduleBeginStep(weftShardSchedule_t schedule);
/* Returns when the group's parameters are gathered (CUDA: once the caller's
 * stream waits for them), after starting the prefetch of the next group
 * (once the order is known). Collective; host: blocking. */
weftResult_t weftShardSchedulePreForward(weftShardSchedule_t schedule, weftShardGroup_t group);
/* ZeRO-3: releases the group. Local. */
weftResult_t weftShardSchedulePostForward(weftShardSchedule_t schedule, weftShardGroup_t group);
/* As PreForward, prefetching the group before it in the order. Collective, blocking. */
weftResult_t weftShardSchedulePreBackward(weftShardSchedule_t schedule, weftShardGroup_t group);
/* Enqueues the reduction of the group's full gradients (grads[i]: parameter
 * i's, as for weftShardGroupReduceGrads; they must stay valid and unchanged
 * until EndStep), then releases the group (ZeRO-3). Collective, non-blocking. */
weftResult_t weftShardSchedulePostBackward(weftShardSchedule_t schedule, weftShardGroup_t group,
                                           const weftTensor_t* grads, int n);
/* Waits for the step's reductions and closes the step; ZeRO-3 releases any
 * group still gathered. The order is known from now on. Host: blocking;
 * returns the first error of the step's asynchronous work. CUDA: the
 * caller's stream waits for the reductions (the host does not); errors of
 * the enqueued collectives surface as the communicators' async errors. */
weftResult_t weftShardScheduleEndStep(weftShardSchedule_t schedule);
/* *order_length: groups in the known or recorded order; *gathered: groups
 * gathered now; *max_gathered: the most at once in the current or last step.
 * Any pointer may be NULL. Local. */
weftResult_t weftShardScheduleGetState(weftShardSchedule_t schedule, int* order_length, int* gathered,
                                       int* max_gathered);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_WEFT_H_ */
