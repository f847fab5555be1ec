/* See c_calls.h: in C an int converts to an enum type without undefined
 * behaviour whatever its value, as in any C caller of weft. Host memory,
 * blocking (stream NULL). */
#include "fuzz/c_calls.h"

weftResult_t FuzzFlatten(const weftTensor_t* srcs, int n, void* dst, int dst_dtype, const size_t* offsets,
                         float scale) {
  return weftFlatten(srcs, n, dst, dst_dtype, offsets, scale, NULL);
}

weftResult_t FuzzFlattenPlan(const weftTensor_t* srcs, int n, void* dst, int dst_dtype, const size_t* offsets,
                             weftCopyPlan_t* plan) {
  return weftFlattenPlanCreate(srcs, n, dst, dst_dtype, offsets, plan);
}

weftResult_t FuzzUnflatten(const void* src, int src_dtype, const size_t* offsets, const weftTensor_t* dsts, int n,
                           float scale, int accumulate) {
  return weftUnflatten(src, src_dtype, offsets, dsts, n, scale, accumulate, NULL);
}

weftResult_t FuzzUnflattenPlan(const void* src, int src_dtype, const size_t* offsets, const weftTensor_t* dsts,
                               int n, int accumulate, weftCopyPlan_t* plan) {
  return weftUnflattenPlanCreate(src, src_dtype, offsets, dsts, n, accumulate, plan);
}

weftResult_t FuzzChunkCat(const weftTensor_t* srcs, int n, int world, const size_t* chunk_counts, void* dst,
                          int dst_dtype, float scale) {
  return weftChunkCat(srcs, n, world, chunk_counts, dst, dst_dtype, scale, NULL);
}

weftResult_t FuzzChunkSplit(const void* src, int src_dtype, int world, const size_t* chunk_counts,
                            const weftTensor_t* dsts, int n, float scale, int accumulate) {
  return weftChunkSplit(src, src_dtype, world, chunk_counts, dsts, n, scale, accumulate, NULL);
}
