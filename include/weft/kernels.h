/*
 * weft/kernels.h: fused multi-tensor kernels (flatten, unflatten, chunk
 * cat/split, AMP unscale, L2 norm) and copy plans.
 */
#ifndef WEFT_KERNELS_H_
#define WEFT_KERNELS_H_

#include <stddef.h>
#include "weft/types.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* The same calls with the caller stating the memory kind, so that no
 * pointer is classified: the calls above find host or CUDA memory from each
 * tensor's pointer (cudaPointerGetAttributes once the CUDA driver is loaded
 * in the process, a driver call per tensor), which a framework that knows
 * where its tensors live (torch's tensor.device) need not pay for.
 *
 * config->memory is an int:
 *   WEFT_MEMORY_AUTO (-1)  find the kind from the pointers, as the calls above do;
 *   weftMemoryHost (0)     every pointer of the call is host memory;
 *   weftMemoryCuda (1)     every pointer is CUDA memory (device or managed).
 * A stated kind is trusted: weft does not ask the driver about any pointer,
 * so a pointer of the other kind is undefined behaviour, as a wrong pointer
 * is in NCCL. What weft can tell without asking the driver it refuses,
 * with weftInvalidArgument naming the argument: weftMemoryCuda while no CUDA
 * driver is loaded in the process (no pointer can be CUDA memory then),
 * weftMemoryHost with a `stream` that is not NULL or a weftStream_t, and
 * weftMemoryCuda with a weftStream_t. Any other value of config->memory is
 * weftInvalidArgument naming it. `config` NULL is WEFT_KERNEL_CONFIG_INITIALIZER.
 * Everything else (arguments, checks, results, `stream`) is as for the call
 * without Ex. */
#define WEFT_MEMORY_AUTO (-1)

/* Versioned (weft/types.h, "Structs"); size accepted: 16. */
typedef struct {
  size_t size;   /* set by the initializer */
  int memory;    /* WEFT_MEMORY_AUTO, weftMemoryHost or weftMemoryCuda (an int, not the enum: it holds -1) */
  int reserved0; /* 0; ignored (fills the tail: the next field makes the struct larger) */
} weftKernelConfig_t;

#define WEFT_KERNEL_CONFIG_INITIALIZER \
  { sizeof(weftKernelConfig_t), WEFT_MEMORY_AUTO, 0 }

weftResult_t weftFlattenEx(const weftTensor_t* srcs, int n, void* dst, weftDataType_t dst_dtype,
                           const size_t* offsets, float scale, const weftKernelConfig_t* config, void* stream);
weftResult_t weftUnflattenEx(const void* src, weftDataType_t src_dtype, const size_t* offsets,
                             const weftTensor_t* dsts, int n, float scale, int accumulate,
                             const weftKernelConfig_t* config, void* stream);
weftResult_t weftUnscaleCheckFiniteEx(const weftTensor_t* tensors, int n, float inv_scale, int* found_inf,
                                      const weftKernelConfig_t* config, void* stream);
weftResult_t weftL2NormEx(const weftTensor_t* tensors, int n, float* norms, float* total,
                          const weftKernelConfig_t* config, void* stream);
weftResult_t weftChunkCatEx(const weftTensor_t* srcs, int n, int world, const size_t* chunk_counts, void* dst,
                            weftDataType_t dst_dtype, float scale, const weftKernelConfig_t* config, void* stream);
weftResult_t weftChunkSplitEx(const void* src, weftDataType_t src_dtype, int world, const size_t* chunk_counts,
                              const weftTensor_t* dsts, int n, float scale, int accumulate,
                              const weftKernelConfig_t* config, void* stream);

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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_KERNELS_H_ */
