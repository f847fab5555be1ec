/*
 * weft/reducer.h: the DDP reducer, bucketed gradient all-reduce overlapped
 * with backward.
 */
#ifndef WEFT_REDUCER_H_
#define WEFT_REDUCER_H_

#include <stddef.h>
#include "weft/types.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* Versioned (weft/types.h, "Structs"); size accepted: 56. Its last field is
 * a pointer, so it has no tail padding (4 bytes of padding precede names). */
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

/* Registers grads[0..n-1] (count and a floating dtype: float32, float64,
 * float16 or bfloat16; an integer one is weftInvalidArgument naming the
 * gradient; data is not read). Collective
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_REDUCER_H_ */
