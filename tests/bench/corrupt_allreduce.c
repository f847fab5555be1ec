/*
 * A deliberately broken weftAllReduce, preloaded into weft-bench to prove that
 * its check catches wrong results: it forwards to libweft's, then flips the
 * lowest bit of the first result element on every rank.
 *
 *   LD_PRELOAD=libcorrupt_allreduce.so weft-bench all_reduce -c 1   # must exit 1
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#include "weft/weft.h"

typedef weftResult_t (*AllReduceFn)(const void*, void*, size_t, weftDataType_t, weftRedOp_t, weftComm_t, void*);

weftResult_t weftAllReduce(const void* sendbuf, void* recvbuf, size_t count, weftDataType_t dtype, weftRedOp_t op,
                           weftComm_t comm, void* stream) {
  static AllReduceFn real = NULL;
  if (real == NULL) {
    /* dlsym returns an object pointer; copying its bits is the ISO C way to a function pointer. */
    void* sym = dlsym(RTLD_NEXT, "weftAllReduce");
    if (sym == NULL) return weftInternalError;
    *(void**)(&real) = sym;
  }
  weftResult_t r = real(sendbuf, recvbuf, count, dtype, op, comm, stream);
  if (r == weftSuccess && count > 0 && recvbuf != NULL) ((unsigned char*)recvbuf)[0] ^= 1u;
  return r;
}
