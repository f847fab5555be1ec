#include "shard/layout.h"

#include <algorithm>
#include <limits>

#include "core/limits.h"
#include "core/status.h"

namespace weft {
namespace shard {
namespace {

constexpr size_t kMax = std::numeric_limits<size_t>::max();
constexpr size_t kMaxFloats = kMaxBufferBytes / sizeof(float);

absl::StatusOr<size_t> Numel(const ParamSpec& p, int i) {
  size_t n = 1;
  for (size_t d = 0; d < p.shape.size(); ++d) {
    const int64_t dim = p.shape[d];
    if (dim < 0) {
      return InvalidArgument("params[%d] (\"%s\"): shape[%zu] = %lld is negative", i, p.name, d,
                             static_cast<long long>(dim));
    }
    if (dim != 0 && n > kMax / static_cast<size_t>(dim)) {
      return InvalidArgument("params[%d] (\"%s\"): element count overflows size_t", i, p.name);
    }
    n *= static_cast<size_t>(dim);
  }
  // Master shards, gradient shards and full checkpoints are float32.
  if (n > kMaxFloats) {
    return InvalidArgument("params[%d] (\"%s\"): %zu elements are more float32 bytes than any buffer holds (%zu at "
                           "most)", i, p.name, n, kMaxBufferBytes);
  }
  return n;
}

absl::Status AddChecked(size_t& acc, size_t x, const char* what) {
  if (acc > kMax - x) return InvalidArgument("%s overflows size_t", what);
  acc += x;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardLayout> PlanShards(absl::Span<const ParamSpec> params, int world, LayoutKind kind) {
  if (world < 1) return InvalidArgument("world = %d must be at least 1", world);
  if (kind != LayoutKind::kFlat && kind != LayoutKind::kPerParam) {
    return InvalidArgument("layout kind = %d is neither flat (0) nor per-parameter (1)", static_cast<int>(kind));
  }
  const size_t w = static_cast<size_t>(world);
  ShardLayout l;
  l.kind = kind;
  l.world = world;
  for (size_t i = 0; i < params.size(); ++i) {
    ASSIGN_OR_RETURN(const size_t n, Numel(params[i], static_cast<int>(i)));
    l.numel.push_back(n);
    RETURN_IF_ERROR(AddChecked(l.total_numel, n, "the group's element count"));
  }
  // With padding the unsharded buffer holds at most world - 1 more.
  if (l.total_numel > kMaxFloats - (w - 1)) {
    return InvalidArgument("the group's %zu elements are more float32 bytes than any buffer holds (%zu at most)",
                           l.total_numel, kMaxBufferBytes);
  }
  if (kind == LayoutKind::kFlat) {
    size_t at = 0;
    for (size_t n : l.numel) {
      l.offset.push_back(at);
      at += n;
    }
    l.shard_numel = (l.total_numel + w - 1) / w;
    return l;
  }
  // Per-parameter: ceil(dim0 / world) rows of each parameter per rank. A
  // scalar is one row of one element.
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& shape = params[i].shape;
    const size_t dim0 = shape.empty() ? 1 : static_cast<size_t>(shape[0]);
    const size_t row = dim0 == 0 ? 0 : l.numel[i] / dim0;
    const size_t rows = (dim0 + w - 1) / w;
    l.chunk_rows.push_back(rows);
    l.row_numel.push_back(row);
    l.offset.push_back(l.shard_numel);
    if (row != 0 && rows > kMax / row) return InvalidArgument("params[%zu]: chunk size overflows size_t", i);
    RETURN_IF_ERROR(AddChecked(l.shard_numel, rows * row, "the shard's element count"));
  }
  if (l.shard_numel > kMaxFloats / w) {
    return InvalidArgument("the unsharded buffer (%zu elements per rank times world = %d) is more float32 bytes than "
                           "any buffer holds (%zu at most)", l.shard_numel, world, kMaxBufferBytes);
  }
  return l;
}

std::vector<ParamShard> ShardLayout::RankShards(int rank) const {
  std::vector<ParamShard> out(numel.size());
  for (size_t i = 0; i < numel.size(); ++i) {
    ParamShard& s = out[i];
    s.param = static_cast<int>(i);
    if (kind == LayoutKind::kFlat) {
      // Intersect [offset, offset + numel) with this rank's slice.
      const size_t lo = static_cast<size_t>(rank) * shard_numel, hi = lo + shard_numel;
      const size_t b = std::max(lo, offset[i]), e = std::min(hi, offset[i] + numel[i]);
      if (b < e) {
        s.param_offset = b - offset[i];
        s.length = e - b;
        s.shard_offset = b - lo;
      } else {
        s.shard_offset = offset[i] >= hi ? shard_numel : 0;
      }
    } else {
      const size_t dim0 = row_numel[i] == 0 ? 0 : numel[i] / row_numel[i];
      const size_t first = std::min(dim0, static_cast<size_t>(rank) * chunk_rows[i]);
      const size_t last = std::min(dim0, first + chunk_rows[i]);
      s.param_offset = first * row_numel[i];
      s.length = (last - first) * row_numel[i];
      s.shard_offset = offset[i];
    }
  }
  return out;
}

}  // namespace shard
}  // namespace weft
