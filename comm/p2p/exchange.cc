#include "comm/p2p/exchange.h"

#include <algorithm>
#include <utility>

#include "comm/p2p/ring.h"
#include "core/reduce.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

size_t Segments(size_t bytes, size_t seg) { return (bytes + seg - 1) / seg; }

// Segment `s` of a block: its offset and length (0 past its end).
std::pair<size_t, size_t> SegmentOf(size_t bytes, size_t seg, int s) {
  const size_t off = static_cast<size_t>(s) * seg;
  return {off, off < bytes ? std::min(seg, bytes - off) : 0};
}

// One lane, one message per step, all from one peer on one user tag. From
// any rank: the engine writes the first message's sender to from_, which
// the later steps then name.
class ReceiveSchedule final : public Schedule {
 public:
  ReceiveSchedule(void* recv, size_t bytes, int from, int tag, size_t message_bytes)
      : recv_(static_cast<unsigned char*>(recv)), bytes_(bytes), from_(from), tag_(UserTag(tag)), seg_(message_bytes) {}
  size_t lanes() const override { return 1; }
  int steps() const override { return static_cast<int>(Segments(bytes_, seg_)); }
  Transfer Post(size_t, int, int step) override {
    const auto [off, len] = SegmentOf(bytes_, seg_, step);
    Transfer x;
    x.from = from_;
    if (from_ == kAnySource) x.source = &from_;
    x.recv = recv_ + off;
    x.recv_bytes = len;
    x.tag = tag_;
    return x;
  }
  void Complete(size_t, int, int) override {}
  int from() const { return from_; }

 private:
  unsigned char* recv_;
  size_t bytes_;
  int from_;
  int tag_;
  size_t seg_;
};

absl::Status RunExchange(const Engine& e, std::vector<ExchangeSchedule::Block> blocks) {
  if (e.size == 1) return absl::OkStatus();
  ExchangeSchedule s(e.rank, e.size, std::move(blocks), e.exchange_bytes != 0 ? e.exchange_bytes : e.segment_bytes);
  return e.run(s, s.window());
}

}  // namespace

ExchangeSchedule::ExchangeSchedule(int rank, int size, std::vector<Block> blocks, size_t segment_bytes)
    : rank_(rank), size_(size), blocks_(std::move(blocks)), seg_(std::max<size_t>(segment_bytes, 1)) {
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const Block& b = blocks_[static_cast<size_t>(q)];
    steps_ = std::max(steps_, static_cast<int>(std::max(Segments(b.send_bytes, seg_), Segments(b.recv_bytes, seg_))));
  }
}

Transfer ExchangeSchedule::Post(size_t lane, int, int step) {
  const int k = static_cast<int>(lane);
  const int to = (rank_ + k + 1) % size_, from = (rank_ - k - 1 + size_) % size_;
  const Block& out = blocks_[static_cast<size_t>(to)];
  const Block& in = blocks_[static_cast<size_t>(from)];
  Transfer x;
  x.tag = k;
  const auto [soff, slen] = SegmentOf(out.send_bytes, seg_, step);
  if (slen > 0) {
    x.to = to;
    x.send = static_cast<const unsigned char*>(out.send) + soff;
    x.send_bytes = slen;
  }
  const auto [roff, rlen] = SegmentOf(in.recv_bytes, seg_, step);
  if (rlen > 0) {
    x.from = from;
    x.recv = static_cast<unsigned char*>(in.recv) + roff;
    x.recv_bytes = rlen;
  }
  return x;
}

absl::Status Gather(const Engine& e, const void* send, void* recv, size_t block_bytes, int root) {
  auto* out = static_cast<unsigned char*>(recv);
  if (e.rank == root) CopyIfDistinct(out + static_cast<size_t>(root) * block_bytes, send, block_bytes);
  if (block_bytes == 0) return absl::OkStatus();
  std::vector<ExchangeSchedule::Block> blocks(static_cast<size_t>(e.size));
  for (int q = 0; q < e.size; ++q) {
    if (e.rank == root) {
      blocks[static_cast<size_t>(q)].recv = out + static_cast<size_t>(q) * block_bytes;
      blocks[static_cast<size_t>(q)].recv_bytes = block_bytes;
    }
  }
  if (e.rank != root) blocks[static_cast<size_t>(root)] = {send, block_bytes, nullptr, 0};
  return RunExchange(e, std::move(blocks));
}

absl::Status Scatter(const Engine& e, const void* send, void* recv, size_t block_bytes, int root) {
  const auto* in = static_cast<const unsigned char*>(send);
  if (e.rank == root) CopyIfDistinct(recv, in + static_cast<size_t>(root) * block_bytes, block_bytes);
  if (block_bytes == 0) return absl::OkStatus();
  std::vector<ExchangeSchedule::Block> blocks(static_cast<size_t>(e.size));
  for (int q = 0; q < e.size; ++q) {
    if (e.rank == root) {
      blocks[static_cast<size_t>(q)].send = in + static_cast<size_t>(q) * block_bytes;
      blocks[static_cast<size_t>(q)].send_bytes = block_bytes;
    }
  }
  if (e.rank != root) blocks[static_cast<size_t>(root)] = {nullptr, 0, recv, block_bytes};
  return RunExchange(e, std::move(blocks));
}

absl::Status AllToAllv(const Engine& e, const void* send, const std::vector<size_t>& sendcounts,
                       const std::vector<size_t>& sdispls, void* recv, const std::vector<size_t>& recvcounts,
                       const std::vector<size_t>& rdispls, DataType t) {
  const size_t es = ElementSize(t);
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  const auto me = static_cast<size_t>(e.rank);
  CopyIfDistinct(out + rdispls[me] * es, in + sdispls[me] * es, std::min(sendcounts[me], recvcounts[me]) * es);
  std::vector<ExchangeSchedule::Block> blocks(static_cast<size_t>(e.size));
  for (size_t q = 0; q < blocks.size(); ++q) {
    blocks[q] = {in + sdispls[q] * es, sendcounts[q] * es, out + rdispls[q] * es, recvcounts[q] * es};
  }
  return RunExchange(e, std::move(blocks));
}

absl::Status Reduce(const Engine& e, const void* send, void* recv, size_t count, DataType t, RedOp op, int root) {
  const size_t es = ElementSize(t), bytes = count * es;
  if (e.size == 1 || count == 0) {  // avg over one rank is the value itself
    if (e.rank == root) CopyIfDistinct(recv, send, bytes);
    return absl::OkStatus();
  }
  if (bytes <= e.direct_bytes) {
    // The root takes every input into scratch at its rank's position.
    std::vector<ExchangeSchedule::Block> blocks(static_cast<size_t>(e.size));
    unsigned char* scratch = nullptr;
    const size_t peers = AlignUp(bytes * static_cast<size_t>(e.size));
    if (e.rank == root) {
      scratch = static_cast<unsigned char*>(e.scratch(peers + count * AccumSize(t)));
      for (size_t q = 0; q < blocks.size(); ++q) blocks[q] = {nullptr, 0, scratch + q * bytes, bytes};
    } else {
      blocks[static_cast<size_t>(root)] = {send, bytes, nullptr, 0};
    }
    RETURN_IF_ERROR(RunExchange(e, std::move(blocks)));
    if (e.rank != root) return absl::OkStatus();
    auto src = [&](int q) -> const void* { return q == e.rank ? send : scratch + static_cast<size_t>(q) * bytes; };
    ReduceInRankOrder(t, op, e.size, src, count, scratch + peers, recv);
    return absl::OkStatus();
  }
  // Chunk c reduced on rank c (the root's straight into its place in recv), then gathered to the root.
  const auto chunk = [&](int c) { return RingSchedule::EvenBegin(count, e.size, c); };
  const size_t own = (chunk(e.rank + 1) - chunk(e.rank)) * es;
  RingSchedule::Args a{t, op, e.rank, e.size, true, false, send, nullptr, nullptr, count, 0, e.segment_bytes,
                       e.window};
  const size_t ring_bytes = AlignUp(RingSchedule::ScratchBytes(a));
  auto* scratch = static_cast<unsigned char*>(e.scratch(ring_bytes + own));
  a.own_out = e.rank == root ? static_cast<unsigned char*>(recv) + chunk(root) * es : scratch + ring_bytes;
  {
    RingSchedule ring(a, scratch);
    RETURN_IF_ERROR(e.run(ring, e.window));
  }
  std::vector<ExchangeSchedule::Block> blocks(static_cast<size_t>(e.size));
  if (e.rank == root) {
    for (int q = 0; q < e.size; ++q) {
      blocks[static_cast<size_t>(q)] = {nullptr, 0, static_cast<unsigned char*>(recv) + chunk(q) * es,
                                        (chunk(q + 1) - chunk(q)) * es};
    }
  } else {
    blocks[static_cast<size_t>(root)] = {a.own_out, own, nullptr, 0};
  }
  return RunExchange(e, std::move(blocks));
}

absl::Status Receive(const Engine& e, void* recv, size_t bytes, int from, int tag, size_t message_bytes,
                     int* source) {
  if (bytes == 0) return absl::OkStatus();
  ReceiveSchedule s(recv, bytes, from, tag, message_bytes);
  RETURN_IF_ERROR(e.run(s, 1));
  if (source != nullptr) *source = s.from();
  return absl::OkStatus();
}

}  // namespace p2p
}  // namespace weft
