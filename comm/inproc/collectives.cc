// In-process collectives. Each one is two phases separated by World
// barriers:
//   publish   every rank writes its buffer pointers into its slot;
//   work      each rank reads its peers' buffers directly (a reduction
//             reduces only this rank's chunk, so each element is combined
//             exactly once, in rank order, and every rank sees the same bits);
//   release   nobody returns (and reuses a buffer) while a peer may still
//             read or write it.
// All-reduce pushes: the rank that reduces a chunk writes the result into
// every rank's output, rather than each rank pulling the chunks it lacks
// after a third barrier. Barriers, not bytes, are what small calls cost
// when the ranks' threads outnumber the cores.
#include <algorithm>
#include <cstring>

#include "comm/inproc/comm.h"
#include "core/reduce.h"
#include "core/status.h"

namespace weft {
namespace inproc {
namespace {

// Reduction works through the accumulator in blocks that stay in cache.
constexpr size_t kBlockElems = 16384;

// [begin, end) of chunk `i` when n elements are split over `parts`.
std::pair<size_t, size_t> Chunk(size_t n, int parts, int i) {
  const size_t base = n / parts, extra = n % parts;
  const size_t b = i * base + std::min<size_t>(i, extra);
  return {b, b + base + (static_cast<size_t>(i) < extra ? 1 : 0)};
}

}  // namespace

void InProcComm::ReduceFromPeers(size_t offset_bytes, size_t n, DataType t, RedOp op, void* out, bool push) {
  const size_t es = ElementSize(t), as = AccumSize(t);
  acc_.resize(std::min(n, kBlockElems) * as);
  for (size_t done = 0; done < n; done += kBlockElems) {
    const size_t m = std::min(kBlockElems, n - done);
    const size_t off = offset_bytes + done * es;
    ToAccum(t, static_cast<const char*>(world_->slot(0).send) + off, acc_.data(), m);
    for (int r = 1; r < size(); ++r) {
      AccumulateInto(t, op, acc_.data(), static_cast<const char*>(world_->slot(r).send) + off, m);
    }
    char* const mine = static_cast<char*>(out) + done * es;
    FromAccum(t, op, size(), acc_.data(), mine, m);
    // Chunk `rank` of every buffer is touched by this rank alone, so the
    // peers' outputs can take it even where they are their inputs.
    for (int r = 0; push && r < size(); ++r) {
      if (r != rank()) std::memcpy(static_cast<char*>(world_->slot(r).recv) + off, mine, m * es);
    }
  }
}

absl::Status InProcComm::DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, void*) {
  const size_t es = ElementSize(t);
  if (size() == 1) {
    // Every op of one rank is the identity (avg divides by 1 exactly): a copy, not a widen-and-round pass.
    if (send != recv && count > 0) std::memcpy(recv, send, count * es);
    return absl::OkStatus();
  }
  world_->slot(rank()) = {send, recv};
  RETURN_IF_ERROR(Arrive());
  // My chunk, reduced from every rank's input into every rank's output.
  const auto [b, e] = Chunk(count, size(), rank());
  if (e > b) ReduceFromPeers(b * es, e - b, t, op, static_cast<char*>(recv) + b * es, /*push=*/true);
  return Arrive();
}

absl::Status InProcComm::DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                         void*) {
  world_->slot(rank()) = {send, recv};
  RETURN_IF_ERROR(Arrive());
  // Only this rank reads block `rank` of any input, so writing it in place is safe.
  if (recvcount > 0) ReduceFromPeers(rank() * recvcount * ElementSize(t), recvcount, t, op, recv);
  return Arrive();
}

absl::Status InProcComm::DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void*) {
  const size_t block = sendcount * ElementSize(t);
  world_->slot(rank()) = {send, recv};
  RETURN_IF_ERROR(Arrive());
  for (int r = 0; r < size(); ++r) {
    char* dst = static_cast<char*>(recv) + r * block;
    const void* src = world_->slot(r).send;
    if (block > 0 && src != dst) std::memcpy(dst, src, block);
  }
  return Arrive();
}

absl::Status InProcComm::DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root, void*) {
  const size_t bytes = count * ElementSize(t);
  world_->slot(rank()) = {send, recv};
  RETURN_IF_ERROR(Arrive());
  const void* src = world_->slot(root).send;
  if (bytes > 0 && src != recv) std::memcpy(recv, src, bytes);
  return Arrive();
}

}  // namespace inproc
}  // namespace weft
