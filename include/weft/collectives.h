/*
 * weft/collectives.h: all-reduce, reduce-scatter, all-gather, broadcast and
 * barrier; send/recv, reduce, gather, scatter, all-to-all(v); groups. The
 * stream and ordering rules are in weft/types.h.
 */
#ifndef WEFT_COLLECTIVES_H_
#define WEFT_COLLECTIVES_H_

#include <stddef.h>
#include "weft/types.h"

#ifdef __cplusplus
extern "C" {
#endif

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
 * they take part in the communicator's issue order on this rank only (no
 * other rank need call anything). peer may be the caller itself. count 0
 * moves nothing and matches nothing.
 *  - Host memory: a send is eager. It copies sendbuf and returns (stream
 *    NULL) or completes (host stream) without waiting for the receiver; weft
 *    delivers it in the background, so ranks that all send before they
 *    receive, with messages of any size, never deadlock, and sendbuf may be
 *    reused at once. A receive blocks (or, on a host stream, occupies the
 *    stream) until the message is in recvbuf, at most the communicator's
 *    timeout (weftTimeout naming the peer). A host receive waits only for
 *    the receives issued before it that could take its message (its tag,
 *    and its peer or either from any rank); it holds back no send,
 *    collective or other receive issued after it on another stream, as
 *    MPI_Irecv does not: every rank may post its receives on host streams
 *    before its sends. A send that is never received
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

/* Tags, as MPI's: a tag is in [0, WEFT_TAG_MAX], the range every MPI
 * guarantees (MPI_TAG_UB >= 32767). */
#define WEFT_TAG_MAX 32767

/* Point-to-point with a tag. A message sent with weftSendTagged on `tag`
 * matches only a receive of the same tag from this rank (weftRecvTagged, or
 * weftRecvAnySource). Between two ranks the messages of one tag match in
 * the order each issued them; messages of different tags are independent, so
 * a receive may take a message sent after one of another tag, and a send
 * never waits behind a message of another tag. Tag 0 is weftSend/weftRecv:
 * weftSend(b, n, t, p, comm, s) is weftSendTagged(b, n, t, p, 0, comm, s).
 * A tag outside [0, WEFT_TAG_MAX] is weftInvalidArgument naming it.
 * Everything else is as for weftSend/weftRecv: the argument checks, eager
 * sends on host memory, streams, groups, the timeout.
 *  - CUDA memory (NCCL): NCCL has no tags; a tag other than 0 is
 *    weftUnsupported (weft does not drop it silently). */
weftResult_t weftSendTagged(const void* sendbuf, size_t count, weftDataType_t dtype, int peer, int tag,
                            weftComm_t comm, void* stream);
weftResult_t weftRecvTagged(void* recvbuf, size_t count, weftDataType_t dtype, int peer, int tag, weftComm_t comm,
                            void* stream);

/* A receive from any rank, as MPI_ANY_SOURCE: it matches the next message of
 * `tag` sent to this rank by any rank (itself included), whichever the
 * transport finds first; each sender's messages of one tag are still taken
 * in that sender's order. Its count and type must be that send's. When the
 * receive completes, *source is the sender's rank, as MPI_Status tells it:
 * on return with stream NULL (outside a group), once weftGroupEnd has
 * returned inside one, once the host stream has synchronised otherwise.
 * From the call until then *source is -1, and it stays -1 if the receive
 * fails; it must stay valid until then, and each pending receive needs its
 * own. source may be NULL (the sender is not reported). count 0 matches
 * nothing (*source is -1). The tag and every other argument are checked as
 * weftRecvTagged checks them.
 *  - CUDA memory (NCCL): NCCL's receives name their peer: weftUnsupported. */
weftResult_t weftRecvAnySource(void* recvbuf, size_t count, weftDataType_t dtype, int tag, int* source,
                               weftComm_t comm, void* stream);

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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_COLLECTIVES_H_ */
