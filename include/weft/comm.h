/*
 * weft/comm.h: communicators: the configuration, the three ways a world is
 * made (the launcher, a unique id, a store), split, queries, abort, destroy.
 */
#ifndef WEFT_COMM_H_
#define WEFT_COMM_H_

#include "weft/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the host backends (MPI, UCX, their shared-memory rounds on one node)
 * wait for peers in a collective. Every policy keeps the timeout and abort.
 *   weftWaitSpin:  poll without pause: the least latency, but a core stays
 *                  busy for as long as the wait lasts.
 *   weftWaitYield: poll, then yield the core for a few ms, then short sleeps.
 *   weftWaitBlock: poll for a few tens of microseconds, then sleep until a
 *                  peer wakes the waiter (shared-memory rounds) or in short
 *                  naps: the core is free for the caller's other threads,
 *                  such as a training step's compute on the same cores.
 * weftWaitDefault: $WEFT_WAIT (spin, yield or block), else weftWaitBlock, or
 *   weftWaitYield on a node that runs more ranks than it has cores.
 * The in-process backend and NCCL wait as they always do. */
typedef enum {
  weftWaitDefault = 0,
  weftWaitSpin = 1,
  weftWaitYield = 2,
  weftWaitBlock = 3,
  weftNumWaitPolicies = 4
} weftWaitPolicy_t;

/* Versioned (weft/types.h, "Structs"); sizes accepted: 32 (before
 * bootstrap_timeout_ms), 40 (before wait), 48 (before trust_memory) and 56. */
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
  int reserved0;            /* 0; ignored (fills what would be padding) */
  weftWaitPolicy_t wait;    /* how host backends wait for peers; weftWaitDefault: see above */
  int reserved1;            /* 0; ignored (fills what would be padding) */
  int trust_memory;         /* 0: every call asks which memory each buffer is in and refuses one of the other kind
                               than `memory` (once the CUDA driver is loaded in the process, that is a
                               cudaPointerGetAttributes per buffer); 1: the caller states that every buffer given
                               to this communicator's collectives, sends and receives, and to the reducers and
                               shard groups made on it, is of `memory`, and no pointer is classified per call (a buffer of the other kind is then undefined behaviour, as in NCCL);
                               inherited by weftCommSplit */
  int reserved2;            /* 0; ignored (fills the tail: the next field makes the struct larger) */
} weftConfig_t;

#define WEFT_CONFIG_INITIALIZER \
  { sizeof(weftConfig_t), weftBackendAuto, weftMemoryHost, 0, -1, 0, 0, 0, weftWaitDefault, 0, 0, 0 }

/* Passing this as `color` to weftCommSplit leaves the caller out: *newcomm is NULL. */
#define WEFT_SPLIT_NOCOLOR (-1)

/* Creates the world communicator from what launched the process. Collective:
 * every process of the job calls it. The world is found in this order
 * (WEFT_DEBUG=INFO logs which one and why):
 *  1. an MPI launcher (mpirun/mpiexec, srun with an MPI that speaks PMI): the
 *     world is MPI_COMM_WORLD. MPI is initialised if the application has not
 *     done so, and finalised by weft at process exit. Host memory runs on MPI
 *     (backend auto) or UCX; CUDA memory on NCCL, its unique id sent over MPI.
 *  2. torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; also
 *     set by Accelerate, Lightning, Ray Train and Kubernetes operators). Under
 *     torchrun's agent (TORCHELASTIC_USE_AGENT_STORE=True) rank 0 serves
 *     weft's bootstrap at a port the kernel picks and publishes it in the
 *     agent's TCPStore at MASTER_ADDR:MASTER_PORT; otherwise it serves it at
 *     MASTER_ADDR, port MASTER_PORT + 1 (never torch's own store port).
 *     $WEFT_MASTER_PORT, when set, is the port in both cases.
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
/* Plain (weft/types.h, "Structs"). */
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
/* Versioned (weft/types.h, "Structs"); size accepted: 32. */
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
 * communicator within the store: a key an earlier communicator left under
 * the same prefix would be read as this one's. torch's PrefixStore gives each
 * process group its own, but the same one again when a job makes its groups
 * again after destroying them; weft's torch backend adds to it how many times
 * the group was made. Collective; blocking.
 *
 * Under an MPI launcher (mpirun, mpiexec, srun --mpi), host memory runs on MPI
 * as weftCommInitWorld's does there: with config backend auto (and more than
 * one rank) or weftBackendMpi, and a libweft built with MPI, each rank first
 * sets its MPI_COMM_WORLD rank under "<prefix>/weft/mpi/<rank>" (initialising
 * MPI if nobody has), rank 0 checks that they are distinct ranks of one MPI job
 * and sets the plan under "<prefix>/weft/mpi/plan", and the ranks make an MPI
 * communicator of themselves, rank i being the store's rank i, without the
 * other ranks of MPI_COMM_WORLD (MPI_Comm_create_group). Where they are not
 * one job's ranks (another launcher on some rank), backend auto takes the
 * unique id's path on every rank and weftBackendMpi fails on every rank with
 * weftInvalidUsage saying why. weftBackendUcx always takes the unique id's
 * path. */
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_COMM_H_ */
