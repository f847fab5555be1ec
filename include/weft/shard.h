/*
 * weft/shard.h: shard groups (FSDP, ZeRO-1/2/3, HSDP) and the shard
 * schedule that prefetches their gathers.
 */
#ifndef WEFT_SHARD_H_
#define WEFT_SHARD_H_

#include <stddef.h>
#include <stdint.h>
#include "weft/types.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* Plain (weft/types.h, "Structs"). */
typedef struct {
  const char* name;               /* for error messages; may be NULL */
  int ndim;                       /* 0 (a scalar) .. WEFT_MAX_DIMS */
  int64_t shape[WEFT_MAX_DIMS];
} weftParamDesc_t;

/* Versioned (weft/types.h, "Structs"); size accepted: 24. */
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
 * length) of the flattened parameter, at shard_offset in the shard buffers.
 * Plain (weft/types.h, "Structs"): weft writes it. */
typedef struct {
  size_t param_offset;
  size_t length;
  size_t shard_offset;
} weftShardDesc_t;

/* Plain (weft/types.h, "Structs"): weft writes it. */
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
 * CUDA memory (config memory = weftMemoryCuda): create the schedule with
 * weftShardScheduleCreateCuda, which takes the cudaStream_t the framework
 * computes on as it is (NULL: the legacy default stream). The schedule enqueues its gathers and reductions
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

/* Versioned (weft/types.h, "Structs"); sizes accepted: 40 (before memory)
 * and 48. */
typedef struct {
  size_t size;
  int reshard_after_forward;  /* 1: ZeRO-3 / FSDP, release each group after its forward and backward;
                                 0: ZeRO-1/2, keep groups gathered until the next BeginStep */
  int prefetch;               /* 1; 0: gather each group only when it is needed */
  weftShardAcquireFn acquire; /* NULL: weft's pool; else acquire and release are both set */
  weftShardReleaseFn release;
  void* user;                 /* passed to acquire and release */
  weftMemoryKind_t memory;    /* weftMemoryHost: groups on host memory (weftShardScheduleCreate);
                                 weftMemoryCuda: groups on CUDA memory (weftShardScheduleCreateCuda) */
  int reserved0;              /* 0; ignored (fills the tail: the next field makes the struct larger) */
} weftShardScheduleConfig_t;

#define WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER \
  { sizeof(weftShardScheduleConfig_t), 1, 1, NULL, NULL, NULL, weftMemoryHost, 0 }

/* A schedule for groups on host memory: `stream` is the weftStream_t the
 * gathers and reductions are enqueued on; NULL: a stream of the schedule's
 * own; anything else is weftInvalidArgument naming `stream`. `config` may be
 * NULL. Local. (With config->memory = weftMemoryCuda it takes a cudaStream_t
 * cast to weftStream_t, as weftShardScheduleCreateCuda does; that form is
 * kept for callers written before the latter.) */
weftResult_t weftShardScheduleCreate(weftStream_t stream, const weftShardScheduleConfig_t* config,
                                     weftShardSchedule_t* schedule);
/* A schedule for groups on CUDA memory: `cuda_stream` is the caller's
 * cudaStream_t (see above; NULL: the legacy default stream), passed without
 * a cast; a weftStream_t is weftInvalidArgument naming `stream`. `config`
 * NULL is WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER with memory = weftMemoryCuda;
 * a config with another memory is weftInvalidArgument naming config->memory.
 * weftUnsupported in a build without CUDA or on a machine without a device.
 * Local. */
weftResult_t weftShardScheduleCreateCuda(void* cuda_stream, const weftShardScheduleConfig_t* config,
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

#endif /* WEFT_SHARD_H_ */
