/*
 * weft/stream.h: host streams, in-order queues of weft work on host memory
 * (the asynchronous form of the host collectives and kernels).
 */
#ifndef WEFT_STREAM_H_
#define WEFT_STREAM_H_

#include "weft/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A host stream is an in-order queue of weft work on host memory, run by a
 * thread of its own: the asynchronous form of the host collectives and
 * kernels, as a cudaStream_t is for device work. A call given a host stream
 * checks its arguments, enqueues the work and returns; the buffers must stay
 * valid and untouched until the stream is synchronised. Work on one stream
 * runs in enqueue order; collectives keep the communicator's issue order
 * whatever stream they are on. An asynchronous failure is reported by the
 * next weftStreamSynchronize/Query of that stream and by
 * weftCommGetAsyncError; work enqueued after a failure still runs. The
 * stream's thread is named "weft-stream" (what top -H, ps -L and gdb show). */
weftResult_t weftStreamCreate(weftStream_t* stream);
/* Flags of weftStreamCreateWithFlags (cudaStreamCreateWithFlags' form), or-ed.
 * weftStreamWaitersRun: a thread blocked in weftStreamSynchronize on the
 * stream runs the stream's pending work itself, in order, whenever the
 * stream's thread is not running any (its callbacks included: they then run
 * on that thread). Work nobody waits for still starts at once on the
 * stream's thread, so asynchrony is unchanged; a caller that waits right
 * after enqueueing, as a blocking collective's caller does, pays no hand-off
 * to the stream's thread and back, two wake-ups that cost tens to hundreds
 * of microseconds where idle cores sleep (a virtual machine's halted vCPUs).
 * weftStreamIssuerCpu: the stream's thread runs each piece of work on the
 * CPU its enqueuing thread was on when it enqueued it (the thread's affinity
 * narrowed to that CPU, within the set it was created with; changed only
 * when the issuer has moved). For ranks without a core to spare, such as
 * several ranks of a node that each compute on their share of its cores: a
 * rank pays for its own collectives on its own core, and the stream threads
 * of ranks computing on different cores never share one, where the
 * shared-memory rounds between them would cost a context switch each. Where
 * a rank has cores to spare, leave it unset: the stream's thread then
 * overlaps communication with computation on another core. */
typedef enum {
  weftStreamDefault = 0,
  weftStreamWaitersRun = 1,
  weftStreamIssuerCpu = 2
} weftStreamFlags_t;
/* weftStreamCreate with `flags` (a bitwise or of weftStreamFlags_t; any
 * other bit is weftInvalidArgument naming `flags`). */
weftResult_t weftStreamCreateWithFlags(weftStream_t* stream, unsigned int flags);
/* Blocks until everything enqueued so far has run. Returns the first error
 * since the last synchronisation, or weftSuccess. */
weftResult_t weftStreamSynchronize(weftStream_t stream);
/* weftSuccess when everything enqueued has run (and none failed since the
 * last synchronisation), weftInProgress when work is pending. Non-blocking. */
weftResult_t weftStreamQuery(weftStream_t stream);
/* A function weftStreamAddCallback runs on the stream's thread (or, on a
 * weftStreamWaitersRun stream, on a thread synchronising it). `status` is
 * the first error of the work enqueued before it since the last
 * synchronisation (weftSuccess if none): the callback takes it, as a
 * synchronisation would, and on that thread weftGetLastError() gives its
 * message. */
typedef void (*weftStreamCallback_t)(weftStream_t stream, weftResult_t status, void* arg);
/* Enqueues fn(stream, status, arg) (cudaStreamAddCallback's semantics): it
 * runs on the stream's thread once everything enqueued before it has run,
 * and what is enqueued after it waits for it; weftStreamSynchronize returns
 * after it returned. Non-blocking; any thread. This is how a framework
 * completes its own handles (futures, events) where the data is ready,
 * without a thread of its own waiting in weftStreamSynchronize. `fn` must
 * not synchronise or destroy `stream` (it would wait for itself); it may
 * issue work on other streams and communicators. */
weftResult_t weftStreamAddCallback(weftStream_t stream, weftStreamCallback_t fn, void* arg);
/* Synchronises, then frees the stream. */
weftResult_t weftStreamDestroy(weftStream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_STREAM_H_ */
