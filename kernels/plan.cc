#include "kernels/plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/limits.h"
#include "core/status.h"
#include "kernels/check.h"

namespace weft {
namespace kernels {
namespace {

void Reset(SegmentList& list) {
  list.segments.clear();
  list.tensor.clear();
  list.total = 0;
}

void SetFlat(SegmentList& list, const void* flat, const char* label, bool is_src) {
  list.flat = flat;
  list.flat_label = label;
  list.flat_is_src = is_src;
}

void Add(SegmentList& list, int tensor, const void* src, DataType src_t, void* dst, DataType dst_t, size_t count) {
  if (count == 0) return;
  list.segments.push_back({src, src_t, dst, dst_t, count});
  list.tensor.push_back(tensor);
  list.total += count;
}

template <typename P>
P* At(P* base, size_t index, DataType t) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<Byte*>(base) + index * FloatSize(t);
}

// The flat side of a flatten/unflatten: NULL only when nothing is copied.
absl::Status CheckFlat(const char* what, const void* p, DataType t, absl::Span<const TensorRef> tensors) {
  RETURN_IF_ERROR(CheckDtype(std::string(what) + "_dtype", t, /*allow_float64=*/true));
  size_t total = 0;
  for (const TensorRef& x : tensors) {
    ASSIGN_OR_RETURN(total, CheckedAdd(absl::StrCat("the elements packed into ", what), total, x.count));
  }
  return CheckBuffer(what, p, total, t);
}

// chunk[i] for every tensor, checked against world and the tensor's count.
absl::StatusOr<std::vector<size_t>> Chunks(const char* what, absl::Span<const TensorRef> tensors, int world,
                                           const size_t* chunk_counts) {
  if (world <= 0) return InvalidArgument("world = %d must be positive", world);
  if (world > kMaxRanks) return InvalidArgument("world = %d is more ranks than weft supports (%d)", world, kMaxRanks);
  std::vector<size_t> chunk(tensors.size());
  const size_t w = static_cast<size_t>(world);
  for (size_t i = 0; i < tensors.size(); ++i) {
    chunk[i] = chunk_counts != nullptr ? chunk_counts[i] : (tensors[i].count + w - 1) / w;
    if (chunk_counts != nullptr && chunk[i] != 0 && chunk[i] > kMaxBufferBytes / w) {
      return InvalidArgument("chunk_counts[%zu] = %zu times world = %d is more elements than any buffer holds", i,
                             chunk[i], world);
    }
    if (chunk[i] * w < tensors[i].count) {
      return InvalidArgument("chunk_counts[%zu] = %zu with world = %d does not cover %s[%zu].count = %zu", i,
                             chunk[i], world, what, i, tensors[i].count);
    }
  }
  return chunk;
}

// The sum of the chunks (one rank's slab), refusing one whose world
// copies are more elements than any buffer holds.
absl::StatusOr<size_t> Slab(const std::vector<size_t>& chunk, int world) {
  size_t slab = 0;
  for (size_t c : chunk) {
    if (c > kMaxBufferBytes - slab) return InvalidArgument("the chunks' sum overflows");
    slab += c;
  }
  if (slab > kMaxBufferBytes / static_cast<size_t>(world)) {
    return InvalidArgument("the chunks (%zu elements per rank) times world = %d are more elements than any buffer "
                           "holds", slab, world);
  }
  return slab;
}

}  // namespace

absl::Status PlanFlatten(absl::Span<const TensorRef> srcs, void* dst, DataType dst_t, const size_t* offsets,
                         SegmentList& list) {
  RETURN_IF_ERROR(CheckTensors("srcs", srcs, /*allow_float64=*/true));
  RETURN_IF_ERROR(CheckFlat("dst", dst, dst_t, srcs));
  Reset(list);
  list.src_label = "srcs";
  list.dst_label = "dst region of srcs";
  SetFlat(list, dst, "dst", false);
  size_t packed = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    const size_t base = offsets != nullptr ? offsets[i] : packed;
    if (offsets != nullptr) RETURN_IF_ERROR(CheckOffset("dst", dst, dst_t, i, base, "srcs", srcs[i].count));
    Add(list, static_cast<int>(i), srcs[i].data, srcs[i].dtype, At(dst, base, dst_t), dst_t, srcs[i].count);
    packed += srcs[i].count;
  }
  return absl::OkStatus();
}

absl::Status PlanUnflatten(const void* src, DataType src_t, const size_t* offsets, absl::Span<const TensorRef> dsts,
                           SegmentList& list) {
  RETURN_IF_ERROR(CheckTensors("dsts", dsts, /*allow_float64=*/true));
  RETURN_IF_ERROR(CheckFlat("src", src, src_t, dsts));
  Reset(list);
  list.src_label = "src region of dsts";
  list.dst_label = "dsts";
  SetFlat(list, src, "src", true);
  size_t packed = 0;
  for (size_t i = 0; i < dsts.size(); ++i) {
    const size_t base = offsets != nullptr ? offsets[i] : packed;
    if (offsets != nullptr) RETURN_IF_ERROR(CheckOffset("src", src, src_t, i, base, "dsts", dsts[i].count));
    Add(list, static_cast<int>(i), At(src, base, src_t), src_t, dsts[i].data, dsts[i].dtype, dsts[i].count);
    packed += dsts[i].count;
  }
  return absl::OkStatus();
}

absl::Status PlanChunkCat(absl::Span<const TensorRef> srcs, int world, const size_t* chunk_counts, void* dst,
                          DataType dst_t, SegmentList& list) {
  RETURN_IF_ERROR(CheckTensors("srcs", srcs, /*allow_float64=*/true));
  RETURN_IF_ERROR(CheckDtype("dst_dtype", dst_t, /*allow_float64=*/true));
  ASSIGN_OR_RETURN(std::vector<size_t> chunk, Chunks("srcs", srcs, world, chunk_counts));
  ASSIGN_OR_RETURN(const size_t slab, Slab(chunk, world));
  RETURN_IF_ERROR(CheckBuffer("dst", dst, slab * static_cast<size_t>(world), dst_t));
  Reset(list);
  list.src_label = "srcs";
  list.dst_label = "dst region of srcs";
  SetFlat(list, dst, "dst", false);
  size_t base = 0;
  for (size_t i = 0; i < srcs.size(); ++i) {
    for (size_t r = 0; r < static_cast<size_t>(world); ++r) {
      const size_t from = r * chunk[i];
      const size_t valid = from < srcs[i].count ? std::min(chunk[i], srcs[i].count - from) : 0;
      void* to = At(dst, r * slab + base, dst_t);
      const void* part = valid > 0 ? At(static_cast<const void*>(srcs[i].data), from, srcs[i].dtype) : nullptr;
      Add(list, static_cast<int>(i), part, srcs[i].dtype, to, dst_t, valid);
      Add(list, static_cast<int>(i), nullptr, srcs[i].dtype, At(to, valid, dst_t), dst_t, chunk[i] - valid);
    }
    base += chunk[i];
  }
  return absl::OkStatus();
}

absl::Status PlanChunkSplit(const void* src, DataType src_t, int world, const size_t* chunk_counts,
                            absl::Span<const TensorRef> dsts, SegmentList& list) {
  RETURN_IF_ERROR(CheckTensors("dsts", dsts, /*allow_float64=*/true));
  RETURN_IF_ERROR(CheckDtype("src_dtype", src_t, /*allow_float64=*/true));
  ASSIGN_OR_RETURN(std::vector<size_t> chunk, Chunks("dsts", dsts, world, chunk_counts));
  ASSIGN_OR_RETURN(const size_t slab, Slab(chunk, world));
  RETURN_IF_ERROR(CheckBuffer("src", src, slab * static_cast<size_t>(world), src_t));
  Reset(list);
  list.src_label = "src region of dsts";
  list.dst_label = "dsts";
  SetFlat(list, src, "src", true);
  size_t base = 0;
  for (size_t i = 0; i < dsts.size(); ++i) {
    for (size_t r = 0; r < static_cast<size_t>(world); ++r) {
      const size_t to = r * chunk[i];
      const size_t valid = to < dsts[i].count ? std::min(chunk[i], dsts[i].count - to) : 0;
      if (valid == 0) continue;
      Add(list, static_cast<int>(i), At(src, r * slab + base, src_t), src_t, At(dsts[i].data, to, dsts[i].dtype),
          dsts[i].dtype, valid);
    }
    base += chunk[i];
  }
  return absl::OkStatus();
}

}  // namespace kernels
}  // namespace weft
