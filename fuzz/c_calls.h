/* The kernels' entry points with their dtype argument as an int, called
 * from C (c_calls.c): a C caller may pass any int where weft.h says
 * weftDataType_t, and that is what the fuzz targets must do; in C++ the
 * conversion of an out-of-range int to the enum would be the target's own
 * undefined behaviour, not weft's. */
#ifndef WEFT_FUZZ_C_CALLS_H_
#define WEFT_FUZZ_C_CALLS_H_

#include <stddef.h>
#include "weft/weft.h"

#ifdef __cplusplus
extern "C" {
#endif

weftResult_t FuzzFlatten(const weftTensor_t* srcs, int n, void* dst, int dst_dtype, const size_t* offsets,
                         float scale);
weftResult_t FuzzFlattenPlan(const weftTensor_t* srcs, int n, void* dst, int dst_dtype, const size_t* offsets,
                             weftCopyPlan_t* plan);
weftResult_t FuzzUnflatten(const void* src, int src_dtype, const size_t* offsets, const weftTensor_t* dsts, int n,
                           float scale, int accumulate);
weftResult_t FuzzUnflattenPlan(const void* src, int src_dtype, const size_t* offsets, const weftTensor_t* dsts,
                               int n, int accumulate, weftCopyPlan_t* plan);
weftResult_t FuzzChunkCat(const weftTensor_t* srcs, int n, int world, const size_t* chunk_counts, void* dst,
                          int dst_dtype, float scale);
weftResult_t FuzzChunkSplit(const void* src, int src_dtype, int world, const size_t* chunk_counts,
                            const weftTensor_t* dsts, int n, float scale, int accumulate);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_FUZZ_C_CALLS_H_ */
