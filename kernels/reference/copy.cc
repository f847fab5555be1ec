// Reference copies: one ConvertElement per element, in the order the
// definitions in kernels/kernels.h read.
#include <cstddef>

#include "kernels/reference/convert.h"
#include "kernels/reference/reference.h"

namespace weft {
namespace kernels {
namespace reference {

size_t ChunkOf(const size_t* chunk_counts, size_t i, size_t count, int world) {
  if (chunk_counts != nullptr) return chunk_counts[i];
  const size_t w = static_cast<size_t>(world);
  return (count + w - 1) / w;
}

void Flatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, const size_t* offsets, float scale) {
  size_t packed = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    const size_t base = offsets != nullptr ? offsets[i] : packed;
    for (size_t j = 0; j < srcs[i].count; ++j) {
      ConvertElement(srcs[i].data, j, srcs[i].dtype, dst, base + j, dst_t, scale, false);
    }
    packed += srcs[i].count;
  }
}

void Unflatten(const void* src, DataType src_t, const size_t* offsets, absl::Span<const TensorRef> dsts,
               float scale, bool accumulate) {
  size_t packed = 0;
  for (size_t i = 0; i < dsts.size(); ++i) {
    const size_t base = offsets != nullptr ? offsets[i] : packed;
    for (size_t j = 0; j < dsts[i].count; ++j) {
      ConvertElement(src, base + j, src_t, dsts[i].data, j, dsts[i].dtype, scale, accumulate);
    }
    packed += dsts[i].count;
  }
}

void ChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts, void* dst, DataType dst_t,
              float scale) {
  size_t slab = 0;
  for (size_t i = 0; i < srcs.size(); ++i) slab += ChunkOf(chunk_counts, i, srcs[i].count, world);
  size_t base = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    const size_t chunk = ChunkOf(chunk_counts, i, srcs[i].count, world);
    for (int r = 0; r < world; ++r) {
      for (size_t k = 0; k < chunk; ++k) {
        const size_t from = static_cast<size_t>(r) * chunk + k;
        const size_t to = static_cast<size_t>(r) * slab + base + k;
        const void* s = from < srcs[i].count ? srcs[i].data : nullptr;  // nullptr: zero padding
        ConvertElement(s, from, srcs[i].dtype, dst, to, dst_t, scale, false);
      }
    }
    base += chunk;
  }
}

void ChunkSplit(const void* src, DataType src_t, int world, const size_t* chunk_counts,
                absl::Span<const TensorRef> dsts, float scale, bool accumulate) {
  size_t slab = 0;
  for (size_t i = 0; i < dsts.size(); ++i) slab += ChunkOf(chunk_counts, i, dsts[i].count, world);
  size_t base = 0;
  for (size_t i = 0; i < dsts.size(); ++i) {
    const size_t chunk = ChunkOf(chunk_counts, i, dsts[i].count, world);
    for (size_t j = 0; j < dsts[i].count; ++j) {
      const size_t r = j / chunk;
      const size_t from = r * slab + base + (j - r * chunk);
      ConvertElement(src, from, src_t, dsts[i].data, j, dsts[i].dtype, scale, accumulate);
    }
    base += chunk;
  }
}

}  // namespace reference
}  // namespace kernels
}  // namespace weft
