// Small blocking collectives on host buffers over any communicator, for the
// bookkeeping around device work: the plan check at creation, the reducer's
// rebuild broadcast. On a host-memory communicator they are the plain
// blocking collectives; on a CUDA one (NCCL takes device buffers only) the
// data goes through device memory of the current device, on `stream` when
// given (so it runs after the work already there: the reducer passes its comm
// stream) or else on a stream of its own, and the call returns when the
// result is back on the host (waiting for that stream only).
//
//   std::vector<int64_t> all(P * n);
//   RETURN_IF_ERROR(StagedAllGather(comm, mine.data(), all.data(), n, DataType::kInt64));
#ifndef WEFT_SHARD_STAGING_H_
#define WEFT_SHARD_STAGING_H_

#include <cstddef>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace weft {
namespace shard {

absl::Status StagedAllGather(Communicator& comm, const void* send, void* recv, size_t count, DataType t,
                             void* stream = nullptr);
absl::Status StagedAllReduce(Communicator& comm, void* buf, size_t count, DataType t, RedOp op,
                             void* stream = nullptr);
absl::Status StagedBroadcast(Communicator& comm, void* buf, size_t count, DataType t, int root,
                             void* stream = nullptr);

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_STAGING_H_
