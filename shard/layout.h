// Shard layouts: how a shard group's parameters are split across ranks.
//
// A pure function of the parameter list and the world size (no
// communication), golden-tested. Two layouts:
//
//  - kFlat (FSDP1, ZeRO-3): the group's parameters concatenated in order and
//    padded to a multiple of the world size; rank r owns the contiguous slice
//    [r * shard_numel, (r + 1) * shard_numel) of that flat buffer. A
//    parameter may straddle ranks, and a rank may hold none of it.
//  - kPerParam (FSDP2): each parameter is chunked along its first dimension
//    into ceil(dim0 / world) rows per rank, the last chunks padded, so each
//    rank's piece is a valid tensor of the parameter's rank. Rank r's shard is
//    its chunk of every parameter, back to back; the all-gather output is the
//    world's shards back to back (FSDP2's chunk_cat layout).
//
// In both, the all-gather of the shards is one buffer of world * shard_numel
// elements ("the unsharded buffer"); `unsharded_offset` says where each
// parameter's first element sits in it (kFlat: contiguous; kPerParam: the
// parameter is spread over the world's slabs, see PerParamPiece).
//
//   std::vector<ParamSpec> params = {{"wte", {50257, 768}}, {"ln.bias", {768}}};
//   ASSIGN_OR_RETURN(ShardLayout l, PlanShards(params, /*world=*/4, LayoutKind::kFlat));
//   for (const ParamShard& s : l.RankShards(rank)) ...
#ifndef WEFT_SHARD_LAYOUT_H_
#define WEFT_SHARD_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace weft {
namespace shard {

enum class LayoutKind : int { kFlat = 0, kPerParam = 1 };

struct ParamSpec {
  std::string name;            // for error messages; may be empty
  std::vector<int64_t> shape;  // empty: a scalar
};

// One rank's part of one parameter.
struct ParamShard {
  int param = 0;              // index into the parameter list
  size_t param_offset = 0;    // first element of the parameter held, in its flattened order
  size_t length = 0;          // elements held (0: this rank holds none of it)
  size_t shard_offset = 0;    // where they live in the rank's shard buffer
};

struct ShardLayout {
  LayoutKind kind = LayoutKind::kFlat;
  int world = 1;
  std::vector<size_t> numel;       // per parameter
  // kPerParam: rows per rank and elements per row of each parameter.
  std::vector<size_t> chunk_rows;
  std::vector<size_t> row_numel;
  // Where parameter i's piece starts inside every rank's shard (kPerParam), or
  // where parameter i starts in the flat unsharded buffer (kFlat).
  std::vector<size_t> offset;
  size_t total_numel = 0;   // sum of numel: the real parameters
  size_t shard_numel = 0;   // elements per rank (padding included)

  size_t unsharded_numel() const { return shard_numel * static_cast<size_t>(world); }
  size_t padding() const { return unsharded_numel() - total_numel; }
  // The parts of each parameter that `rank` holds, in parameter order (one
  // entry per parameter, length 0 where it holds none).
  std::vector<ParamShard> RankShards(int rank) const;
};

// Refuses world < 1, negative dimensions, and element counts that overflow.
absl::StatusOr<ShardLayout> PlanShards(absl::Span<const ParamSpec> params, int world, LayoutKind kind);

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_LAYOUT_H_
