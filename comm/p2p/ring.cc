#include "comm/p2p/ring.h"

#include <algorithm>
#include <cstring>

#include "core/reduce.h"

namespace weft {
namespace p2p {
namespace {

// Segments are whole multiples of this many elements, so every slot buffer
// of any wire type starts 8-byte aligned.
constexpr size_t kSegQuantum = 64;

size_t SegElems(size_t segment_bytes, size_t wire_size) {
  const size_t e = segment_bytes / wire_size / kSegQuantum * kSegQuantum;
  return std::max(e, kSegQuantum);
}

bool WireIsAccum(DataType t, RedOp op, bool reduce) {
  return reduce && !AccumIsSelf(t) && (IsHalf(t) || op == RedOp::kAvg);
}

size_t MaxLength(const RingSchedule::Args& a) {
  return a.block > 0 ? a.block : (a.count + static_cast<size_t>(a.size) - 1) / static_cast<size_t>(a.size);
}

size_t LaneCount(const RingSchedule::Args& a, size_t seg) { return (MaxLength(a) + seg - 1) / seg; }

// Slots the pipeline will use (it never runs more lanes at once than exist).
size_t SlotCount(const RingSchedule::Args& a, size_t lanes) {
  return std::min(static_cast<size_t>(std::max(a.window, 1)), std::max<size_t>(lanes, 1));
}

}  // namespace

size_t RingSchedule::ScratchBytes(const Args& a) {
  if (!a.reduce_scatter) return 0;
  const size_t ws = WireIsAccum(a.t, a.op, true) ? AccumSize(a.t) : ElementSize(a.t);
  const size_t seg = SegElems(a.segment_bytes, ws);
  const size_t slots = SlotCount(a, LaneCount(a, seg));
  // Two buffers per slot (one is received into while the other is sent),
  // plus an accumulator for integer types reduced in their element type.
  return 2 * slots * seg * ws + seg * AccumSize(a.t);
}

RingSchedule::RingSchedule(const Args& a, void* scratch)
    : a_(a), scratch_(static_cast<unsigned char*>(scratch)), es_(ElementSize(a.t)),
      ws_(WireIsAccum(a.t, a.op, a.reduce_scatter) ? AccumSize(a.t) : es_),
      wire_accum_(WireIsAccum(a.t, a.op, a.reduce_scatter)),
      seg_(SegElems(a.segment_bytes, ws_)), lanes_(LaneCount(a, seg_)), slots_(SlotCount(a, lanes_)),
      rs_steps_(a.reduce_scatter ? a.size - 1 : 0), ag_steps_(a.all_gather ? a.size - 1 : 0) {
  own_out_ = a.own_out != nullptr ? static_cast<unsigned char*>(a.own_out)
                                  : static_cast<unsigned char*>(a.out) + Begin(a.rank) * es_;
}

size_t RingSchedule::Begin(int c) const {
  const size_t cc = static_cast<size_t>(c);
  if (a_.block > 0) return cc * a_.block;
  return EvenBegin(a_.count, a_.size, c);
}

size_t RingSchedule::EvenBegin(size_t count, int size, int c) {
  const size_t cc = static_cast<size_t>(c), n = static_cast<size_t>(size), base = count / n, extra = count % n;
  return cc * base + std::min(cc, extra);
}

size_t RingSchedule::Length(int c) const {
  if (a_.block > 0) return a_.block;
  return EvenBegin(a_.count, a_.size, c + 1) - EvenBegin(a_.count, a_.size, c);
}

size_t RingSchedule::SegLen(int c, size_t lane) const {
  const size_t len = Length(c), off = lane * seg_;
  return off < len ? std::min(seg_, len - off) : 0;
}

unsigned char* RingSchedule::Buf(int slot, int which) const {
  return scratch_ + (2 * static_cast<size_t>(slot) + static_cast<size_t>(which)) * seg_ * ws_;
}

Transfer RingSchedule::Post(size_t lane, int slot, int step) {
  Transfer x;
  const int r = a_.rank;
  const size_t off = lane * seg_;
  if (step < rs_steps_) {
    const int send_c = Mod(r - step - 1), recv_c = Mod(r - step - 2);
    const size_t send_n = SegLen(send_c, lane), recv_n = SegLen(recv_c, lane);
    if (send_n > 0) {
      const void* src = Buf(slot, (step + 1) % 2);  // what step-1 received and reduced
      if (step == 0) {
        const auto* mine = static_cast<const unsigned char*>(a_.in) + (Begin(send_c) + off) * es_;
        if (wire_accum_) {
          ToAccum(a_.t, mine, Buf(slot, 1), send_n);
        } else {
          src = mine;
        }
      }
      x.send = src;
      x.send_bytes = send_n * ws_;
      x.to = Mod(r + 1);
    }
    if (recv_n > 0) {
      x.recv = Buf(slot, step % 2);
      x.recv_bytes = recv_n * ws_;
      x.from = Mod(r - 1);
    }
  } else {
    const int s = step - rs_steps_;
    const int send_c = Mod(r - s), recv_c = Mod(r - s - 1);
    const size_t send_n = SegLen(send_c, lane), recv_n = SegLen(recv_c, lane);
    auto* out = static_cast<unsigned char*>(a_.out);
    if (send_n > 0) {
      x.send = out + (Begin(send_c) + off) * es_;
      x.send_bytes = send_n * es_;
      x.to = Mod(r + 1);
    }
    if (recv_n > 0) {
      x.recv = out + (Begin(recv_c) + off) * es_;
      x.recv_bytes = recv_n * es_;
      x.from = Mod(r - 1);
    }
  }
  x.tag = slot;
  return x;
}

void RingSchedule::Complete(size_t lane, int slot, int step) {
  if (step >= rs_steps_) return;
  const int c = Mod(a_.rank - step - 2);
  const size_t n = SegLen(c, lane), off = lane * seg_;
  if (n == 0) return;
  unsigned char* partial = Buf(slot, step % 2);
  const auto* mine = static_cast<const unsigned char*>(a_.in) + (Begin(c) + off) * es_;
  if (wire_accum_ || AccumIsSelf(a_.t)) {
    AccumulateInto(a_.t, a_.op, partial, mine, n);
  } else {
    // An integer partial in its element type: widen, combine, narrow (no avg here).
    unsigned char* acc = scratch_ + 2 * slots_ * seg_ * ws_;
    ToAccum(a_.t, partial, acc, n);
    AccumulateInto(a_.t, a_.op, acc, mine, n);
    FromAccum(a_.t, a_.op, a_.size, acc, partial, n);
  }
  if (step != rs_steps_ - 1) return;
  // Chunk `rank` is complete: round it once into the output.
  unsigned char* dst = own_out_ + off * es_;
  if (wire_accum_ || a_.op == RedOp::kAvg) {
    FromAccum(a_.t, a_.op, a_.size, partial, dst, n);
  } else {
    std::memcpy(dst, partial, n * es_);
  }
}

ChainSchedule::ChainSchedule(const void* send, void* recv, size_t bytes, int root, int rank, int size,
                             size_t segment_bytes)
    : recv_(static_cast<unsigned char*>(recv)), bytes_(bytes), seg_(std::max<size_t>(segment_bytes, 1)),
      lanes_((bytes + seg_ - 1) / seg_), pos_(((rank - root) % size + size) % size), size_(size),
      prev_((rank - 1 + size) % size), next_((rank + 1) % size) {
  src_ = pos_ == 0 ? static_cast<const unsigned char*>(send) : recv_;
}

Transfer ChainSchedule::Post(size_t lane, int slot, int step) {
  Transfer x;
  const size_t off = lane * seg_, n = std::min(seg_, bytes_ - off);
  if (step == 0 && pos_ > 0) {
    x.recv = recv_ + off;
    x.recv_bytes = n;
    x.from = prev_;
  }
  if (step == 1 && pos_ < size_ - 1) {
    x.send = src_ + off;
    x.send_bytes = n;
    x.to = next_;
  }
  x.tag = slot;
  return x;
}

}  // namespace p2p
}  // namespace weft
