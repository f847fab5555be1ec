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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_STREAM_H_ */
