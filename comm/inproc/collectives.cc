// In-process collectives. Each one is:
//   publish   every rank writes its buffer pointers, count and signature
//             into its slot and waits for the others (a World barrier);
//             ranks that disagree all fail with the same error;
//   work      the collective's chunks are shared (InProcComm::Share): each
//             is done by whichever rank claims it first, reading its peers'
//             buffers directly and writing every rank's output (a reduction
//             combines each element exactly once, in rank order, so every
//             rank sees the same bits whoever did the chunk);
//   release   nobody returns (and reuses a buffer) before every chunk is done.
// Sharing rather than each rank doing its own 1/N: with the ranks' threads
// outnumbering the cores (4 ranks and their streams on 2 vCPUs), a static
// split makes every rank wait for the slowest thread to be scheduled, then
// to run its part; shared chunks go to the threads that are running.
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
// A shared chunk: 256 KiB of output, so that the last chunks of a call
// are short (two threads finish together), and claiming one (a single
// compare-and-swap) is nothing beside its work. Measured against 64 KiB,
// 1 MiB and 4 MiB, and against 1 MiB with a minimum number per rank, on
// ResNet-50's reducer with 4 ranks on 2 vCPUs (docs/performance.md).
constexpr size_t kChunkBytes = size_t{256} << 10;

// [begin, end) of chunk `i` when n elements are split over `parts`.
std::pair<size_t, size_t> Chunk(size_t n, size_t parts, size_t i) {
  const size_t base = n / parts, extra = n % parts;
  const size_t b = i * base + std::min(i, extra);
  return {b, b + base + (i < extra ? 1 : 0)};
}

// Chunks for `bytes`: at least one when there is anything to do.
size_t Pieces(size_t bytes) { return (bytes + kChunkBytes - 1) / kChunkBytes; }

enum Kind : int64_t {
  kAllReduce = 1,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kAllReducePieces,
  kAllReduceReady,
  kAllReduceReadyParts,
  kReduce,
  kGather,
  kScatter,
  kAllToAllv,
  kBarrier,
  kSplit
};

const char* KindName(int64_t k) {
  switch (k) {
    case kAllReduce: return "all_reduce";
    case kReduceScatter: return "reduce_scatter";
    case kAllGather: return "all_gather";
    case kBroadcast: return "broadcast";
    case kAllReducePieces: return "all_reduce_pieces";
    case kAllReduceReady: return "all_reduce_ready";
    case kAllReduceReadyParts: return "all_reduce_ready";
    case kReduce: return "reduce";
    case kGather: return "gather";
    case kScatter: return "scatter";
    case kAllToAllv: return "all_to_all";
    case kBarrier: return "barrier";
    case kSplit: return "split";
  }
  return "collective";
}

// What every rank must agree on besides the count.
int64_t Signature(Kind kind, DataType t, RedOp op = RedOp::kSum, int root = -1) {
  return kind << 32 | static_cast<int64_t>(root + 1) << 16 | static_cast<int64_t>(op) << 8 |
         static_cast<int64_t>(t);
}

std::string Describe(const Slot& slot) {
  const int64_t count = slot.a, sig = slot.b;
  const Kind kind = static_cast<Kind>(sig >> 32);
  if (kind == kBarrier || kind == kSplit) return KindName(kind);
  std::string s = absl::StrFormat("%s of %d %s", KindName(kind), count,
                                  Name(static_cast<DataType>(sig & 0xff)));
  if (kind == kAllReduceReady) {
    s = absl::StrFormat("all_reduce_ready of %s from element %d up to %d", Name(static_cast<DataType>(sig & 0xff)),
                        count, slot.c);
  }
  if (kind == kAllReduceReadyParts) {  // c: a hash of upto and the parts
    s = absl::StrFormat("all_reduce_ready of %s in parts from element %d", Name(static_cast<DataType>(sig & 0xff)),
                        count);
  }
  if (kind == kAllReduce || kind == kReduceScatter || kind == kAllReducePieces || kind == kAllReduceReady ||
      kind == kAllReduceReadyParts || kind == kReduce) {
    s += absl::StrFormat(" (%s)", Name(static_cast<RedOp>(sig >> 8 & 0xff)));
  }
  if (kind == kAllToAllv) s = absl::StrFormat("all_to_all of %s", Name(static_cast<DataType>(sig & 0xff)));
  const int root = static_cast<int>((sig >> 16 & 0xffff) - 1);
  if (kind == kBroadcast || kind == kScatter) s += absl::StrFormat(" from root %d", root);
  if (kind == kReduce || kind == kGather) s += absl::StrFormat(" to root %d", root);
  return s;
}

}  // namespace

absl::Status InProcComm::Publish(const void* send, void* recv, size_t count, int64_t signature, uint64_t layout,
                                 uint64_t offer) {
  if (!broken_.ok()) return broken_.get();
  world_->slot(rank()) = {send, recv, static_cast<int64_t>(count), signature, layout, offer};
  RETURN_IF_ERROR(Arrive(/*compare=*/true));
  const int r = world_->disagreement();
  if (r < 0) return absl::OkStatus();
  // Every rank fails alike and touches no peer's buffer; the barrier keeps
  // the slots until all have read them for the message.
  const Slot &zero = world_->slot(0), &other = world_->slot(r);
  const char* why = "";  // what the descriptions do not show
  if (zero.a == other.a && zero.b == other.b) {
    if ((zero.b >> 32) == kAllReducePieces) why = " with other piece offsets or counts";
    if ((zero.b >> 32) == kAllReduceReadyParts) why = " with other parts or another upto";
  }
  const absl::Status mismatch = InvalidUsage("the ranks called different collectives: rank 0 called %s, rank %d "
                                             "called %s%s", Describe(zero), r, Describe(other), why);
  // Read before the barrier: past it a peer may publish its next call.
  const int kind = static_cast<int>(zero.b >> 32);
  const bool breaks = zero.b != other.b || (kind != kAllReduceReady && kind != kAllReduceReadyParts);
  RETURN_IF_ERROR(Arrive());
  if (breaks) {
    broken_.Set(InvalidUsage("rank %d: this communicator is unusable after its ranks called different collectives "
                             "(%s); destroy it", rank(), mismatch.message()));
  }
  return mismatch;
}

template <typename Work>
void InProcComm::Share(size_t n, Work&& work) {
  const uint64_t base = tickets_, end = base + n;
  tickets_ = end;  // every rank adds the same n: the counts were compared
  for (uint64_t t; (t = world_->Claim(end)) < end;) {
    work(static_cast<size_t>(t - base));
    world_->Finish(end);
  }
  world_->WaitDone(end);
}

void InProcComm::ReduceInto(size_t n, DataType t, RedOp op, const char* const* src, char* const* dst, int ndst) {
  const size_t es = ElementSize(t), as = AccumSize(t);
  acc_.resize(std::min(n, kBlockElems) * as);
  for (size_t done = 0; done < n; done += kBlockElems) {
    const size_t m = std::min(kBlockElems, n - done), off = done * es;
    ToAccum(t, src[0] + off, acc_.data(), m);
    for (int r = 1; r < size(); ++r) AccumulateInto(t, op, acc_.data(), src[r] + off, m);
    FromAccum(t, op, size(), acc_.data(), dst[0] + off, m);
    // This block of every buffer is touched by this chunk's owner alone, so
    // an output can take it even where it is its input.
    for (int d = 1; d < ndst; ++d) std::memcpy(dst[d] + off, dst[0] + off, m * es);
  }
}

absl::Status InProcComm::DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, void*) {
  const size_t es = ElementSize(t);
  if (size() == 1) {
    // Every op of one rank is the identity (avg divides by 1 exactly): a copy, not a widen-and-round pass.
    if (send != recv && count > 0) std::memcpy(recv, send, count * es);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Publish(send, recv, count, Signature(kAllReduce, t, op)));
  AllReduceShared(count, t, op);
  return absl::OkStatus();
}

// Each chunk reduced from every rank's input into this rank's output, and
// pushed into the peers' outputs.
void InProcComm::AllReduceShared(size_t count, DataType t, RedOp op) {
  const size_t es = ElementSize(t), n = Pieces(count * es);
  Share(n, [&](size_t i) {
    const auto [b, e] = Chunk(count, n, i);
    for (int r = 0, d = 1; r < size(); ++r) {
      src_[r] = static_cast<const char*>(world_->slot(r).send) + b * es;
      char* out = static_cast<char*>(world_->slot(r).recv) + b * es;
      if (r == rank()) dst_[0] = out; else dst_[d++] = out;
    }
    ReduceInto(e - b, t, op, src_.data(), dst_.data(), size());
  });
}

// The offers travel in the slots with the call (not compared), and every
// rank takes the least of them: the agreement costs no barrier of its own.
// `reduced` and `upto` are compared like a count.
absl::StatusOr<size_t> InProcComm::DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto,
                                                    DataType t, RedOp op) {
  if (size() == 1) return offer;  // every op of one rank is the identity
  void* from = static_cast<unsigned char*>(data) + reduced * ElementSize(t);
  RETURN_IF_ERROR(Publish(from, from, reduced, Signature(kAllReduceReady, t, op), upto, offer));
  const uint64_t agreed = world_->least_d();
  AllReduceShared(agreed - reduced, t, op);
  return static_cast<size_t>(agreed);
}

// Pieces: the logical buffer is cut into chunks like a plain all-reduce's
// (gaps between pieces count, so every rank cuts alike); a chunk reduces the
// parts of the pieces inside it, each from every rank's own pointers.
absl::Status InProcComm::DoAllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op) {
  const size_t es = ElementSize(t);
  if (size() == 1) {
    for (const Piece& p : pieces) {
      if (p.send != p.recv && p.count > 0) std::memcpy(p.recv, p.send, p.count * es);
    }
    return absl::OkStatus();
  }
  const size_t count = pieces.back().offset + pieces.back().count;
  RETURN_IF_ERROR(Publish(pieces.data(), nullptr, count, Signature(kAllReducePieces, t, op), PartsLayout(pieces)));
  ReducePiecesShared(pieces, 0, count, t, op);
  return absl::OkStatus();
}

// Elements [begin, end) of the logical buffer, every rank's pieces (published
// in its slot's `send`, the same layout as `pieces`) reduced in shared chunks.
void InProcComm::ReducePiecesShared(const std::vector<Piece>& pieces, size_t begin, size_t end, DataType t,
                                    RedOp op) {
  const size_t es = ElementSize(t), count = end - begin, n = Pieces(count * es);
  Share(n, [&](size_t i) {
    auto [b, e] = Chunk(count, n, i);
    b += begin, e += begin;
    auto j = static_cast<size_t>(std::partition_point(pieces.begin(), pieces.end(),
                                                      [b = b](const Piece& p) { return p.offset + p.count <= b; }) -
                                 pieces.begin());
    for (; j < pieces.size() && pieces[j].offset < e; ++j) {
      const size_t lo = std::max(b, pieces[j].offset), hi = std::min(e, pieces[j].offset + pieces[j].count);
      if (lo >= hi) continue;
      const size_t skip = (lo - pieces[j].offset) * es;
      for (int r = 0, d = 1; r < size(); ++r) {
        const Piece& p = static_cast<const Piece*>(world_->slot(r).send)[j];
        src_[r] = static_cast<const char*>(p.send) + skip;
        char* out = static_cast<char*>(p.recv) + skip;
        if (r == rank()) dst_[0] = out; else dst_[d++] = out;
      }
      ReduceInto(hi - lo, t, op, src_.data(), dst_.data(), size());
    }
  });
}

// A ready buffer in parts: one publish carries the parts and the offer,
// compared by a hash of the parts' layout and upto, and the agreed range is
// reduced across the parts in shared chunks, as one buffer would be.
absl::StatusOr<size_t> InProcComm::DoAllReduceReadyParts(const std::vector<Piece>& parts, size_t reduced,
                                                         size_t offer, size_t upto, DataType t, RedOp op) {
  if (size() == 1) return offer;
  const uint64_t layout = (PartsLayout(parts) ^ static_cast<uint64_t>(upto)) * 0x100000001b3ull;
  RETURN_IF_ERROR(Publish(parts.data(), nullptr, reduced, Signature(kAllReduceReadyParts, t, op), layout, offer));
  const uint64_t agreed = world_->least_d();
  ReducePiecesShared(parts, reduced, agreed, t, op);
  return static_cast<size_t>(agreed);
}

absl::Status InProcComm::DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                         void*) {
  const size_t es = ElementSize(t);
  RETURN_IF_ERROR(Publish(send, recv, recvcount, Signature(kReduceScatter, t, op)));
  // Block q of every input, reduced into rank q's output. Only the chunk's
  // owner reads those elements of any input, so writing them in place is safe.
  const size_t per = Pieces(recvcount * es);
  Share(per * size(), [&](size_t i) {
    const size_t q = i / per;
    const auto [b, e] = Chunk(recvcount, per, i % per);
    for (int r = 0; r < size(); ++r) {
      src_[r] = static_cast<const char*>(world_->slot(r).send) + (q * recvcount + b) * es;
    }
    dst_[0] = static_cast<char*>(world_->slot(q).recv) + b * es;
    ReduceInto(e - b, t, op, src_.data(), dst_.data(), 1);
  });
  return absl::OkStatus();
}

absl::Status InProcComm::DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void*) {
  const size_t block = sendcount * ElementSize(t);
  RETURN_IF_ERROR(Publish(send, recv, sendcount, Signature(kAllGather, t)));
  // Piece j of rank r's input, into block r of every output.
  const size_t per = Pieces(block);
  Share(per * size(), [&](size_t i) {
    const size_t r = i / per;
    const auto [b, e] = Chunk(block, per, i % per);
    const char* src = static_cast<const char*>(world_->slot(r).send) + b;
    for (int q = 0; q < size(); ++q) {
      char* dst = static_cast<char*>(world_->slot(q).recv) + r * block + b;
      if (dst != src) std::memcpy(dst, src, e - b);
    }
  });
  return absl::OkStatus();
}

absl::Status InProcComm::DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root, void*) {
  const size_t bytes = count * ElementSize(t);
  RETURN_IF_ERROR(Publish(send, recv, count, Signature(kBroadcast, t, RedOp::kSum, root)));
  const size_t n = Pieces(bytes);
  Share(n, [&](size_t i) {
    const auto [b, e] = Chunk(bytes, n, i);
    const char* src = static_cast<const char*>(world_->slot(root).send) + b;
    for (int q = 0; q < size(); ++q) {
      char* dst = static_cast<char*>(world_->slot(q).recv) + b;
      if (dst != src) std::memcpy(dst, src, e - b);
    }
  });
  return absl::OkStatus();
}

absl::Status InProcComm::DoReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                                  void*) {
  const size_t es = ElementSize(t);
  if (size() == 1) {  // every op of one rank is the identity
    if (send != recv && count > 0) std::memcpy(recv, send, count * es);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Publish(send, recv, count, Signature(kReduce, t, op, root)));
  // Each chunk reduced from every rank's input, in rank order, into root's output.
  const size_t n = Pieces(count * es);
  Share(n, [&](size_t i) {
    const auto [b, e] = Chunk(count, n, i);
    for (int r = 0; r < size(); ++r) src_[r] = static_cast<const char*>(world_->slot(r).send) + b * es;
    dst_[0] = static_cast<char*>(world_->slot(root).recv) + b * es;
    ReduceInto(e - b, t, op, src_.data(), dst_.data(), 1);
  });
  return absl::OkStatus();
}

absl::Status InProcComm::DoGather(const void* send, void* recv, size_t sendcount, DataType t, int root, void*) {
  const size_t block = sendcount * ElementSize(t);
  RETURN_IF_ERROR(Publish(send, recv, sendcount, Signature(kGather, t, RedOp::kSum, root)));
  // Piece j of rank r's input, into block r of root's output.
  const size_t per = Pieces(block);
  Share(per * size(), [&](size_t i) {
    const size_t r = i / per;
    const auto [b, e] = Chunk(block, per, i % per);
    const char* src = static_cast<const char*>(world_->slot(static_cast<int>(r)).send) + b;
    char* dst = static_cast<char*>(world_->slot(root).recv) + r * block + b;
    if (dst != src) std::memcpy(dst, src, e - b);
  });
  return absl::OkStatus();
}

absl::Status InProcComm::DoScatter(const void* send, void* recv, size_t recvcount, DataType t, int root, void*) {
  const size_t block = recvcount * ElementSize(t);
  RETURN_IF_ERROR(Publish(send, recv, recvcount, Signature(kScatter, t, RedOp::kSum, root)));
  // Piece j of root's block q, into rank q's output.
  const size_t per = Pieces(block);
  Share(per * size(), [&](size_t i) {
    const size_t q = i / per;
    const auto [b, e] = Chunk(block, per, i % per);
    const char* src = static_cast<const char*>(world_->slot(root).send) + q * block + b;
    char* dst = static_cast<char*>(world_->slot(static_cast<int>(q)).recv) + b;
    if (dst != src) std::memcpy(dst, src, e - b);
  });
  return absl::OkStatus();
}

namespace {

// What a rank publishes for an all-to-all (in its slot's `send`).
struct Blocks {
  const void* send;
  void* recv;
  const std::vector<size_t>* sendcounts;
  const std::vector<size_t>* sdispls;
  const std::vector<size_t>* recvcounts;
  const std::vector<size_t>* rdispls;
};

}  // namespace

// Every rank checks the whole matrix of published counts (rank r's
// sendcounts[q] against rank q's recvcounts[r]) and so reaches the same
// verdict; then the blocks, each cut into chunks, are shared.
absl::Status InProcComm::DoAllToAllv(const void* send, const std::vector<size_t>& sendcounts,
                                     const std::vector<size_t>& sdispls, void* recv,
                                     const std::vector<size_t>& recvcounts, const std::vector<size_t>& rdispls,
                                     DataType t, void*) {
  const Blocks mine{send, recv, &sendcounts, &sdispls, &recvcounts, &rdispls};
  RETURN_IF_ERROR(Publish(&mine, nullptr, 0, Signature(kAllToAllv, t)));
  const int n = size();
  const auto at = [&](int r) -> const Blocks& { return *static_cast<const Blocks*>(world_->slot(r).send); };
  absl::Status verdict;
  for (int r = 0; r < n && verdict.ok(); ++r) {
    for (int q = 0; q < n && verdict.ok(); ++q) {
      const size_t sent = (*at(r).sendcounts)[q], expected = (*at(q).recvcounts)[r];
      if (sent == expected) continue;
      verdict = InvalidUsage("the ranks' counts disagree: rank %d sends %zu %s to rank %d, which receives %zu from "
                             "rank %d", r, sent, Name(t), q, expected, r);
    }
  }
  const size_t es = ElementSize(t);
  std::vector<size_t> first(static_cast<size_t>(n * n) + 1, 0);  // the first chunk of block (r, q)
  for (int k = 0; verdict.ok() && k < n * n; ++k) first[k + 1] = first[k] + Pieces((*at(k / n).sendcounts)[k % n] * es);
  // Nobody leaves, and frees its counts, while a peer may still read them here.
  RETURN_IF_ERROR(Arrive());
  if (!verdict.ok()) {
    broken_.Set(InvalidUsage("rank %d: this communicator is unusable after its ranks disagreed (%s); destroy it",
                             rank(), verdict.message()));
    return verdict;
  }
  Share(first.back(), [&](size_t i) {
    const int k = static_cast<int>(std::upper_bound(first.begin(), first.end(), i) - first.begin()) - 1;
    const int r = k / n, q = k % n;
    const size_t bytes = (*at(r).sendcounts)[q] * es;
    const auto [b, e] = Chunk(bytes, first[k + 1] - first[k], i - first[k]);
    const char* src = static_cast<const char*>(at(r).send) + (*at(r).sdispls)[q] * es + b;
    char* dst = static_cast<char*>(at(q).recv) + (*at(q).rdispls)[r] * es + b;
    std::memcpy(dst, src, e - b);
  });
  return absl::OkStatus();
}

// A barrier and a split publish a signature like any collective, so that a
// rank in one of them while a peer is in an all-reduce fails alike with the
// peer instead of reading a slot the peer never filled.
absl::Status InProcComm::DoBarrier() { return Publish(nullptr, nullptr, 0, Signature(kBarrier, DataType::kUint8)); }

// Color and key ride in `d`, which is not compared.
absl::Status InProcComm::PublishSplit(int color, int key) {
  const uint64_t packed = static_cast<uint64_t>(static_cast<uint32_t>(color)) << 32 | static_cast<uint32_t>(key);
  return Publish(nullptr, nullptr, 0, Signature(kSplit, DataType::kUint8), 0, packed);
}

}  // namespace inproc
}  // namespace weft
