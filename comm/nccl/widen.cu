// The int16 <-> int32 conversions of widen.h: one grid-stride loop each.
#include "comm/nccl/widen.h"

#include <cstdint>

namespace weft {
namespace nccl {
namespace {

constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 4096;  // enough to fill an H100 several times over; the loop covers the rest

unsigned Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < kMaxBlocks ? b : kMaxBlocks);
}

__global__ void WidenKernel(const int16_t* src, int32_t* dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = src[i];
}

// Modulo 2^16, as the host backends narrow their int64 accumulators.
__global__ void NarrowKernel(const int32_t* src, int16_t* dst, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = static_cast<int16_t>(static_cast<uint16_t>(static_cast<uint32_t>(src[i])));
  }
}

}  // namespace

cudaError_t WidenInt16(const void* src, void* dst, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  WidenKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const int16_t*>(src), static_cast<int32_t*>(dst), n);
  return cudaGetLastError();
}

cudaError_t NarrowToInt16(const void* src, void* dst, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  NarrowKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const int32_t*>(src), static_cast<int16_t*>(dst), n);
  return cudaGetLastError();
}

}  // namespace nccl
}  // namespace weft
