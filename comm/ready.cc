// AllReduceReady: an all-reduce of a buffer still being filled, reducing
// what every rank has ready when it runs (comm/direct.h).
//
// Why: the DDP reducer launches a bucket's segments in order as backward
// fills them, one collective each so that communication starts early. When
// the reducer falls behind (a burst of small gradients, or no compute
// between them at all) those calls queue up, and each pays a full
// synchronisation of the ranks, which with more ranks than cores is a wait
// for the slowest to be scheduled. Horovod's coordinator answers the same
// problem by negotiating, each cycle, which tensors every rank has ready and
// fusing them into one message. Here the negotiation rides on the call: each
// rank says how far it has filled, the call reduces up to the least of
// those, and the queued calls it covered do nothing.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "comm/direct.h"
#include "comm/fault.h"
#include "core/status.h"
#include "core/trace.h"

namespace weft {

namespace {

size_t Total(const std::vector<Piece>& parts) {
  return parts.empty() ? 0 : parts.back().offset + parts.back().count;
}

}  // namespace

ReadyBuffer::ReadyBuffer(void* data, size_t count, DataType t)
    : ReadyBuffer(std::vector<Piece>{Piece{data, data, 0, count}}, t) {}

ReadyBuffer::ReadyBuffer(std::vector<Piece> parts, DataType t)
    : parts_(parts.empty() ? std::vector<Piece>{Piece{}} : std::move(parts)), count_(Total(parts_)), dtype_(t) {}

void ReadyBuffer::SetReady(size_t end) {
  end = std::min(end, count_);
  size_t now = ready_.load(std::memory_order_relaxed);
  while (now < end && !ready_.compare_exchange_weak(now, end, std::memory_order_release)) {
  }
}

void ReadyBuffer::Reset() {
  ready_.store(0, std::memory_order_relaxed);
  reduced_ = 0;
  calls_ = merged_ = 0;
}

absl::Status DirectReduce::AllReduceReady(std::shared_ptr<ReadyBuffer> buf, size_t upto, RedOp op, void* stream) {
  if (buf == nullptr) return InvalidArgument("all_reduce_ready: buf is NULL");
  const DataType t = buf->dtype();
  if (!IsValid(t)) {
    return InvalidArgument("all_reduce_ready: the buffer's datatype = %d is not a weftDataType_t (expected 0..%d)",
                           static_cast<int>(t), kNumDataTypes - 1);
  }
  if (!IsValid(op)) {
    return InvalidArgument("all_reduce_ready: op = %d is not a weftRedOp_t (expected 0..%d)", static_cast<int>(op),
                           kNumRedOps - 1);
  }
  if (self_.memory() != MemKind::kHost) {
    return Unsupported("all_reduce_ready: backend %s works on %s memory; the ranks agree on what is ready when the "
                       "call runs, which only host memory can tell", Name(self_.backend()), Name(self_.memory()));
  }
  if (upto > buf->count()) {
    return InvalidArgument("all_reduce_ready: upto = %zu is beyond the buffer's %zu elements", upto, buf->count());
  }
  if (buf->count() > SIZE_MAX / ElementSize(t)) {
    return InvalidArgument("all_reduce_ready: the buffer's %zu elements of %s overflow size_t", buf->count(), Name(t));
  }
  // The parts are fixed: checked on a buffer's first call on this communicator (the reducer makes ~50 calls
  // a step on one buffer of several parts).
  const std::vector<Piece>& parts = buf->parts();
  for (size_t i = 0, at = 0; buf->checked_for_.load(std::memory_order_acquire) != &self_ && i < parts.size();
       at += parts[i].count, ++i) {
    const Piece& p = parts[i];
    if (p.send != p.recv || p.offset != at) {
      return InvalidArgument("all_reduce_ready: the buffer's part %zu is not in place and back to back (send %p, "
                             "recv %p, offset %zu where the parts before end at %zu)", i, p.send, p.recv, p.offset,
                             at);
    }
    RETURN_IF_ERROR(Annotate(self_.CheckBuffer(parts.size() == 1 ? "the buffer's data" : "a part of the buffer", p.recv,
                                         p.count * ElementSize(t)),
                             "all_reduce_ready"));
  }
  buf->checked_for_.store(&self_, std::memory_order_release);
  trace::NoteCall(upto, static_cast<int>(t), static_cast<int>(op), -1);
  const fault::Call call{nullptr, 0, buf->data(), std::min(upto, parts.front().count) * ElementSize(t), t, false};
  return self_.Issue("all_reduce_ready", stream, fault::Hook(self_, call, [this, buf = std::move(buf), upto, t,
                                                                           op](const void*) -> absl::Status {
    ReadyBuffer& b = *buf;
    ++b.calls_;
    if (b.reduced_ >= upto) {  // an earlier call reached past [0, upto), on every rank
      ++b.merged_;
      return absl::OkStatus();
    }
    const size_t ready = b.ready();
    absl::Status short_of;
    if (ready < upto) {
      short_of = InvalidUsage("rank %d had [0, %zu) of the buffer ready when the call that must reach %zu ran; it "
                              "reduced whatever lay there, so the peers' results are wrong too", self_.rank(), ready, upto);
    }
    const size_t offer = fault::ReadyOffer(self_, b.parts(), b.reduced_, std::max(ready, upto), upto, t);
    ASSIGN_OR_RETURN(const size_t agreed, b.parts().size() == 1
                                              ? DoAllReduceReady(b.data(), b.reduced_, offer, upto, t, op)
                                              : DoAllReduceReadyParts(b.parts(), b.reduced_, offer, upto, t, op));
    b.reduced_ = agreed;
    return short_of;
  }));
}

// One small all-reduce settles the extent and checks that the ranks are in
// the same call: the minimum of {offer, reduced, -reduced, upto, -upto,
// layout, -layout} gives the least offer and, for the others, both their
// least and greatest.
absl::StatusOr<size_t> DirectReduce::AgreeReady(size_t reduced, size_t offer, size_t upto, uint64_t layout) {
  const auto s = [](size_t v) { return static_cast<int64_t>(v); };
  const auto l = static_cast<int64_t>(layout >> 2);  // negating it cannot overflow
  int64_t v[7] = {s(offer), s(reduced), -s(reduced), s(upto), -s(upto), l, -l};
  RETURN_IF_ERROR(self_.DoAllReduce(v, v, 7, DataType::kInt64, RedOp::kMin, nullptr));
  if (v[1] != -v[2] || v[3] != -v[4]) {
    return InvalidUsage("the ranks called all_reduce_ready at different points: reduced %d to %d, upto %d to %d "
                        "(every rank must issue the same calls on the same buffer)", v[1], -v[2], v[3], -v[4]);
  }
  if (v[5] != -v[6]) {
    return InvalidUsage("the ranks called all_reduce_ready on buffers whose parts differ in their offsets or counts");
  }
  return static_cast<size_t>(v[0]);
}

absl::StatusOr<size_t> DirectReduce::DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto,
                                                      DataType t, RedOp op) {
  ASSIGN_OR_RETURN(const size_t agreed, AgreeReady(reduced, offer, upto, 0));
  void* from = static_cast<unsigned char*>(data) + reduced * ElementSize(t);
  RETURN_IF_ERROR(self_.DoAllReduce(from, from, agreed - reduced, t, op, nullptr));
  return agreed;
}

// The agreement compares the parts' layouts, so every rank that gets past
// it makes the same calls here.
absl::StatusOr<size_t> DirectReduce::DoAllReduceReadyParts(const std::vector<Piece>& parts, size_t reduced,
                                                           size_t offer, size_t upto, DataType t, RedOp op) {
  ASSIGN_OR_RETURN(const size_t agreed, AgreeReady(reduced, offer, upto, PartsLayout(parts)));
  for (const Piece& p : parts) {
    const size_t lo = std::max(reduced, p.offset), hi = std::min(agreed, p.offset + p.count);
    if (lo >= hi) continue;
    void* from = static_cast<unsigned char*>(p.recv) + (lo - p.offset) * ElementSize(t);
    RETURN_IF_ERROR(self_.DoAllReduce(from, from, hi - lo, t, op, nullptr));
  }
  return agreed;
}

}  // namespace weft
