/*
 * weft: the communication runtime under data-parallel and sharded training.
 *
 * This is weft's whole public C ABI: communicators, the four collectives DDP,
 * FSDP and ZeRO are built from, point-to-point and the rooted and all-to-all
 * collectives a framework's process group offers, host streams for asynchronous host
 * collectives, the fused multi-tensor kernels, the DDP reducer and sharding.
 * It is pure C99 and names no CUDA, MPI or C++ type, so framework backends
 * can include it from C, C++, Rust or Python ctypes. The vocabulary follows
 * NCCL's, which every framework backend already speaks.
 *
 *   weftComm_t comm;
 *   weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;   // every default
 *   if (weftCommInitWorld(&comm, &cfg) != weftSuccess)
 *     fprintf(stderr, "weft: %s\n", weftGetLastError());
 *   weftAllReduce(grad, grad, n, weftFloat32, weftAvg, comm, NULL);  // blocks
 *   weftCommDestroy(comm);
 *
 * It includes one header per subsystem, each of which may be included alone
 * (each includes weft/types.h):
 *   weft/types.h        version, result codes, dtypes, ops, backends, memory
 *                       kinds, handles, weftTensor_t, errors; the conventions
 *                       every entry point keeps, and versioned vs plain structs
 *   weft/comm.h         communicators: weftConfig_t, worlds, split, queries
 *   weft/collectives.h  collectives, send/recv, rooted and all-to-all, groups
 *   weft/stream.h       host streams
 *   weft/kernels.h      fused multi-tensor kernels and copy plans
 *   weft/reducer.h      the DDP reducer
 *   weft/shard.h        shard groups (FSDP, ZeRO, HSDP) and the shard schedule
 */
#ifndef WEFT_WEFT_H_
#define WEFT_WEFT_H_

#include "weft/types.h"
#include "weft/comm.h"
#include "weft/collectives.h"
#include "weft/stream.h"
#include "weft/kernels.h"
#include "weft/reducer.h"
#include "weft/shard.h"

#endif /* WEFT_WEFT_H_ */
