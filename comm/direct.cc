// DirectReduce's pieces half: AllReducePieces and its checks, and how a
// caller finds the interface (comm/direct.h). The ready half is ready.cc.
#include "comm/direct.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/arguments.h"
#include "comm/fault.h"
#include "core/memory.h"
#include "core/status.h"
#include "core/trace.h"

namespace weft {

DirectReduce* FindDirectReduce(Communicator& comm) { return dynamic_cast<DirectReduce*>(&comm); }

const std::vector<Piece>& PieceList::pieces() const {
  static const std::vector<Piece> kNone;
  return list_ != nullptr ? *list_ : kNone;
}

uint64_t PartsLayout(const std::vector<Piece>& pieces) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the offsets and counts
  for (const Piece& p : pieces) {
    for (uint64_t v : {static_cast<uint64_t>(p.offset), static_cast<uint64_t>(p.count)}) {
      h = (h ^ v) * 0x100000001b3ull;
    }
  }
  return h;
}

absl::StatusOr<PieceList> DirectReduce::CheckPieces(std::vector<Piece> pieces, DataType t,
                                                    const std::function<std::string(size_t)>& label) const {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "all_reduce_pieces"));
  const auto name = [&](size_t i) { return label ? label(i) : absl::StrFormat("piece %zu", i); };
  struct Span {
    uintptr_t begin, end;
    size_t piece;
  };
  std::vector<Span> spans;  // every piece's memory, for the overlap check
  size_t end = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    const std::string what = absl::StrCat("all_reduce_pieces: ", name(i));
    if (p.offset < end) {
      return InvalidArgument("%s starts at element %zu, inside the piece before it (which ends at %zu): pieces must "
                             "ascend without overlapping", what, p.offset, end);
    }
    if (p.count > std::numeric_limits<size_t>::max() - p.offset) {
      return InvalidArgument("%s: offset = %zu + count = %zu overflows", what, p.offset, p.count);
    }
    absl::StatusOr<size_t> bytes = Bytes("count", p.count, 1, t);
    RETURN_IF_ERROR(Annotate(bytes.status(), what));
    RETURN_IF_ERROR(Annotate(self_.CheckBuffer("send", p.send, *bytes), what));
    RETURN_IF_ERROR(Annotate(self_.CheckBuffer("recv", p.recv, *bytes), what));
    if (p.send != p.recv && Overlap(p.send, *bytes, p.recv, *bytes)) {
      return InvalidArgument("%s: send = %p and recv = %p overlap without being equal", what, p.send, p.recv);
    }
    end = p.offset + p.count;
    if (*bytes == 0) continue;
    const auto at = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
    spans.push_back({at(p.recv), at(p.recv) + *bytes, i});
    if (p.send != p.recv) spans.push_back({at(p.send), at(p.send) + *bytes, i});
  }
  // Sorted by start, an overlap shows between neighbours (a piece's own two
  // spans were checked above).
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.begin < y.begin; });
  for (size_t k = 1; k < spans.size(); ++k) {
    if (spans[k].begin >= spans[k - 1].end) continue;
    return InvalidArgument("all_reduce_pieces: %s and %s overlap in memory (%p and %p)", name(spans[k - 1].piece),
                           name(spans[k].piece), reinterpret_cast<void*>(spans[k - 1].begin),
                           reinterpret_cast<void*>(spans[k].begin));
  }
  PieceList list;
  list.list_ = std::make_shared<const std::vector<Piece>>(std::move(pieces));
  list.dtype_ = t;
  list.memory_ = self_.memory();
  return list;
}

absl::Status DirectReduce::AllReducePieces(std::vector<Piece> pieces, DataType t, RedOp op, void* stream) {
  ASSIGN_OR_RETURN(PieceList list, CheckPieces(std::move(pieces), t));
  return AllReducePieces(list, op, stream);
}

absl::Status DirectReduce::AllReducePieces(const PieceList& pieces, RedOp op, void* stream) {
  const DataType t = pieces.dtype();
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, &op), "all_reduce_pieces"));
  if (!ReducesPieces()) {
    return Unsupported("all_reduce_pieces: backend %s does not reduce buffers in pieces; pack them and call "
                       "all_reduce", Name(self_.backend()));
  }
  if (!pieces.empty() && pieces.memory_ != self_.memory()) {
    return InvalidArgument("all_reduce_pieces: the pieces were checked for %s memory but this communicator (backend "
                           "%s) works on %s memory", Name(pieces.memory_), Name(self_.backend()), Name(self_.memory()));
  }
  if (pieces.empty()) return absl::OkStatus();
  if (trace::On()) {
    size_t total = 0;
    for (const Piece& p : pieces.pieces()) total += p.count;
    trace::NoteCall(total, static_cast<int>(t), static_cast<int>(op));
  }
  return self_.Issue("all_reduce_pieces", stream, fault::HookPieces(self_, pieces.list_, t, [this, t, op](
                                                                     const std::vector<Piece>& list) {
    return DoAllReducePieces(list, t, op);
  }));
}

absl::Status DirectReduce::DoAllReducePieces(const std::vector<Piece>&, DataType, RedOp) {
  return Unsupported("all_reduce_pieces: backend %s does not reduce buffers in pieces", Name(self_.backend()));
}

}  // namespace weft
