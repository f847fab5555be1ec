// What every rank of a point-to-point backend (MPI, UCX) checks before it
// trusts a collective's data: a fingerprint of the call (which collective,
// dtype, count, op, root, and the call's number on the communicator), so
// that ranks which disagree fail with InvalidUsage naming what each called
// instead of returning wrong elements or waiting out a timeout.
//
// A Call is three words, cheap to publish and compare:
//   word 0: the call's number (32 bits) | kind << 16 | dtype << 8 | op
//   word 1: the count (0 for all-to-all, whose counts are per peer)
//   word 2: root + 1 for rooted calls; for all-to-all, this rank's share of
//           a sum over every (sender, receiver) pair of a hash of the bytes
//           the sender sends minus a hash of what the receiver expects, so
//           that the ranks' counts agree exactly when the shares add to 0
//           (but for a 2^-64 chance).
// Every rank sees every rank's Call (shm.h: in the control pages after one
// barrier; CheckCall below: an all-gather of them in log2(N) steps) and
// Decide reaches the same verdict on every rank, so none waits for another.
//
//   RETURN_IF_ERROR(CheckCall(engine, Stamp(MakeCall(CallKind::kAllReduce, t, count, op), seq++)));
#ifndef WEFT_COMM_P2P_CHECK_H_
#define WEFT_COMM_P2P_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "comm/p2p/collectives.h"
#include "core/dtype.h"

namespace weft {
namespace p2p {

enum class CallKind : uint8_t {
  kAllReduce = 1,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kBarrier,
  kReduce,
  kGather,
  kScatter,
  kAllToAll,
  kAllReduceReady,
  kSplit,
  kSend,  // the header of an eager send (count and dtype), checked by its receive
};

struct Call {
  uint64_t words[3] = {0, 0, 0};
};
inline constexpr size_t kCallWords = 3;

Call MakeCall(CallKind kind, DataType t, size_t count, RedOp op = RedOp::kSum, int root = -1);
// All-to-all(v): counts in elements, one per rank.
Call MakeAllToAllCall(int rank, DataType t, const std::vector<size_t>& sendcounts,
                      const std::vector<size_t>& recvcounts);
// `c` as the communicator's call number `seq`.
Call Stamp(Call c, uint64_t seq);

// "all_reduce(count 1000, float32, sum)".
std::string Describe(const Call& c);

// The verdict over every rank's call (call_of(q), q = 0..size-1), the same
// on every rank that sees the same calls: OK, or InvalidUsage naming the
// first rank whose call differs from rank 0's and both calls.
absl::Status Decide(int rank, int size, absl::FunctionRef<Call(int)> call_of);

// Whether `s` is Decide's refusal (the ranks called different collectives).
bool IsCallMismatch(const absl::Status& s);

// Collective over point-to-point: an all-gather of every rank's Call
// (Bruck's: step s sends what this rank knows, up to 2^s calls, to rank +
// 2^s), then Decide. Every rank learns every call, so it is a barrier too.
absl::Status CheckCall(const Engine& e, const Call& mine);

// A receive's check of the header that came first from `from` on `tag`
// against the send it expects (kSend: its count, dtype and number between
// the two on that tag).
absl::Status CheckMessage(int rank, int from, int tag, const Call& expected, const Call& got);

// Whether calls are checked (WEFT_CHECK_CALLS, default 1).
bool CheckCalls();

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_CHECK_H_
