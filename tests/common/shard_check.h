// One rank's part of a shard-group step (shard/shard_group.h), over any
// communicator: unshard gives back the full parameters (cast once to the
// compute dtype), two micro-batches of gradients reduce into the fp32 shards
// as their average over ranks, and memory returns to the pool. Gradients are
// small integers (times 1/4), so every float sum and average is exact and
// results are compared bit for bit. Run by tests/multirank (thread ranks)
// and the world suite (processes).
#ifndef WEFT_TESTS_COMMON_SHARD_CHECK_H_
#define WEFT_TESTS_COMMON_SHARD_CHECK_H_

#include <vector>

#include "comm/communicator.h"
#include "shard/shard_group.h"

namespace weft {
namespace shard {

extern const std::vector<ParamSpec> kParams;
// The parameters' full values, the same on every rank for one seed.
std::vector<std::vector<float>> FullValues(uint32_t seed);
// Rank r's gradient of parameter i, element j: exact in every dtype used.
float Grad(int r, size_t i, size_t j);
std::vector<const float*> Ptrs(const std::vector<std::vector<float>>& v);
// Collective over `c`; fails the running test (gtest) on a wrong value.
void CheckShardGroupStep(Communicator& c, const ShardGroupOptions& opts, bool use_stream);

}  // namespace shard
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_SHARD_CHECK_H_
