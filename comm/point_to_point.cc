// The checked entry points of point-to-point and the rooted and personalised
// collectives (send, recv, reduce, gather, scatter, all-to-all), as
// communicator.cc has them for the others: every argument is checked before
// anything is issued, and errors name the argument and its value.
#include <algorithm>
#include <utility>
#include <vector>

#include "comm/arguments.h"
#include "comm/communicator.h"
#include "comm/fault.h"
#include "core/status.h"
#include "core/trace.h"

namespace weft {

absl::Status Communicator::CheckRank(const char* call, const char* what, int r) const {
  if (r < 0 || r >= size_) {
    return InvalidArgument("%s: %s = %d is outside [0, %d) (the communicator's size)", call, what, r, size_);
  }
  return absl::OkStatus();
}

absl::Status Communicator::CheckTag(const char* call, int tag) const {
  if (tag < 0 || tag > kMaxTag) {
    return InvalidArgument("%s: tag = %d is outside [0, %d] (WEFT_TAG_MAX)", call, tag, kMaxTag);
  }
  const char* why = TagsUnsupported();
  if (tag != 0 && why != nullptr) {
    return Unsupported("%s: tag = %d on a communicator of backend %s, which matches by order alone: %s", call, tag,
                       Name(backend()), why);
  }
  return absl::OkStatus();
}

absl::Status Communicator::SendTagged(const void* send, size_t count, DataType t, int peer, int tag, void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "send"));
  RETURN_IF_ERROR(CheckRank("send", "peer", peer));
  RETURN_IF_ERROR(CheckTag("send", tag));
  absl::StatusOr<size_t> bytes = Bytes("count", count, 1, t);
  RETURN_IF_ERROR(Annotate(bytes.status(), "send"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, *bytes), "send"));
  if (count == 0) return absl::OkStatus();  // moves nothing and matches nothing, as in NCCL
  trace::NoteCall(count, static_cast<int>(t), -1, peer, tag);
  return Issue("send", stream, fault::Hook(*this, {send, *bytes, nullptr, 0, t, false}, [=, this](const void* s) {
    return DoSend(s, count, t, peer, tag, stream);
  }), CallRole{CallRole::Kind::kSend});
}

absl::Status Communicator::RecvTagged(void* recv, size_t count, DataType t, int peer, int tag, void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "recv"));
  RETURN_IF_ERROR(CheckRank("recv", "peer", peer));
  RETURN_IF_ERROR(CheckTag("recv", tag));
  absl::StatusOr<size_t> bytes = Bytes("count", count, 1, t);
  RETURN_IF_ERROR(Annotate(bytes.status(), "recv"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, *bytes), "recv"));
  if (count == 0) return absl::OkStatus();
  trace::NoteCall(count, static_cast<int>(t), -1, peer, tag);
  return Issue("recv", stream, fault::Hook(*this, {nullptr, 0, recv, *bytes, t, false}, [=, this](const void*) {
    return DoRecv(recv, count, t, peer, tag, nullptr, stream);
  }), CallRole{CallRole::Kind::kReceive, peer, tag});
}

absl::Status Communicator::RecvAnySource(void* recv, size_t count, DataType t, int tag, int* source, void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "recv_any_source"));
  if (const char* why = TagsUnsupported(); why != nullptr) {
    return Unsupported("recv_any_source: a receive from any source on a communicator of backend %s, which matches "
                       "by order alone: %s", Name(backend()), why);
  }
  RETURN_IF_ERROR(CheckTag("recv_any_source", tag));
  absl::StatusOr<size_t> bytes = Bytes("count", count, 1, t);
  RETURN_IF_ERROR(Annotate(bytes.status(), "recv_any_source"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, *bytes), "recv_any_source"));
  if (source != nullptr) *source = -1;  // until the receive completes, and if it fails
  if (count == 0) return absl::OkStatus();
  trace::NoteCall(count, static_cast<int>(t), -1, -1, tag);
  const fault::Call call{nullptr, 0, recv, *bytes, t, false};
  return Issue("recv_any_source", stream, fault::Hook(*this, call, [=, this](const void*) {
    return DoRecv(recv, count, t, kAnySource, tag, source, stream);
  }), CallRole{CallRole::Kind::kReceive, kAnySource, tag});
}

absl::Status Communicator::Reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                                  void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, &op), "reduce"));
  RETURN_IF_ERROR(CheckRank("reduce", "root", root));
  absl::StatusOr<size_t> bytes = Bytes("count", count, 1, t);
  RETURN_IF_ERROR(Annotate(bytes.status(), "reduce"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, *bytes), "reduce"));
  if (rank_ == root) {
    RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, *bytes), "reduce"));
    if (send != recv && memory() == MemKind::kHost && Overlap(send, *bytes, recv, *bytes)) {
      return InvalidArgument("reduce: sendbuf = %p and recvbuf = %p overlap without being equal", send, recv);
    }
  }
  trace::NoteCall(count, static_cast<int>(t), static_cast<int>(op), root);
  const size_t out = rank_ == root ? *bytes : 0;
  return Issue("reduce", stream, fault::Hook(*this, {send, *bytes, recv, out, t, true}, [=, this](const void* s) {
    return DoReduce(s, recv, count, t, op, root, stream);
  }));
}

absl::Status Communicator::Gather(const void* send, void* recv, size_t sendcount, DataType t, int root,
                                  void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "gather"));
  RETURN_IF_ERROR(CheckRank("gather", "root", root));
  absl::StatusOr<size_t> total = Bytes("sendcount", sendcount, static_cast<size_t>(size_), t);
  RETURN_IF_ERROR(Annotate(total.status(), "gather"));
  const size_t block = sendcount * ElementSize(t);
  RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, block), "gather"));
  if (rank_ == root) {
    RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, *total), "gather"));
    const void* own = static_cast<const char*>(recv) + static_cast<size_t>(rank_) * block;
    if (send != own && memory() == MemKind::kHost && Overlap(send, block, recv, *total)) {
      return InvalidArgument("gather: sendbuf = %p overlaps recvbuf = %p but is not its in-place slice %p "
                             "(recvbuf + root %d * sendcount)", send, recv, own, rank_);
    }
  }
  trace::NoteCall(sendcount, static_cast<int>(t), -1, root);
  const fault::Call call{send, block, recv, rank_ == root ? *total : 0, t, false};
  return Issue("gather", stream, fault::Hook(*this, call, [=, this](const void* s) {
    return DoGather(s, recv, sendcount, t, root, stream);
  }));
}

absl::Status Communicator::Scatter(const void* send, void* recv, size_t recvcount, DataType t, int root,
                                   void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "scatter"));
  RETURN_IF_ERROR(CheckRank("scatter", "root", root));
  absl::StatusOr<size_t> total = Bytes("recvcount", recvcount, static_cast<size_t>(size_), t);
  RETURN_IF_ERROR(Annotate(total.status(), "scatter"));
  const size_t block = recvcount * ElementSize(t);
  RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, block), "scatter"));
  if (rank_ == root) {
    RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, *total), "scatter"));
    const void* own = static_cast<const char*>(send) + static_cast<size_t>(rank_) * block;
    if (recv != own && memory() == MemKind::kHost && Overlap(send, *total, recv, block)) {
      return InvalidArgument("scatter: recvbuf = %p overlaps sendbuf = %p but is not its in-place slice %p "
                             "(sendbuf + root %d * recvcount)", recv, send, own, rank_);
    }
  }
  trace::NoteCall(recvcount, static_cast<int>(t), -1, root);
  const fault::Call call{send, rank_ == root ? *total : 0, recv, block, t, false};
  return Issue("scatter", stream, fault::Hook(*this, call, [=, this](const void* s) {
    return DoScatter(s, recv, recvcount, t, root, stream);
  }));
}

absl::Status Communicator::AllToAll(const void* send, void* recv, size_t count, DataType t, void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "all_to_all"));
  absl::StatusOr<size_t> total = Bytes("count", count, static_cast<size_t>(size_), t);
  RETURN_IF_ERROR(Annotate(total.status(), "all_to_all"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, *total), "all_to_all"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, *total), "all_to_all"));
  if (memory() == MemKind::kHost && Overlap(send, *total, recv, *total)) {
    return InvalidArgument("all_to_all: sendbuf = %p and recvbuf = %p overlap (all-to-all is never in place)", send,
                           recv);
  }
  std::vector<size_t> counts(static_cast<size_t>(size_), count), displs(static_cast<size_t>(size_));
  for (size_t q = 0; q < displs.size(); ++q) displs[q] = q * count;
  trace::NoteCall(count, static_cast<int>(t), -1, -1);
  const fault::Call call{send, *total, recv, *total, t, false};
  return Issue("all_to_all", stream, fault::Hook(*this, call, [=, this](const void* s) {
    return DoAllToAllv(s, counts, displs, recv, counts, displs, t, stream);
  }));
}

namespace {

// Checks one side of an all-to-allv (counts and displacements of `n`
// blocks) and returns its extent in bytes, the end of its last block.
absl::StatusOr<size_t> CheckBlocks(const char* counts_name, const size_t* counts, const char* displs_name,
                                   const size_t* displs, int n, DataType t) {
  if (counts == nullptr) return InvalidArgument("all_to_allv: %s is NULL", counts_name);
  if (displs == nullptr) return InvalidArgument("all_to_allv: %s is NULL", displs_name);
  const size_t es = ElementSize(t);
  struct Span {
    size_t begin, end;
    int q;
  };
  std::vector<Span> spans;
  size_t extent = 0;
  for (int q = 0; q < n; ++q) {
    const size_t c = counts[q], d = displs[q];
    if (d > std::numeric_limits<size_t>::max() / es || c > std::numeric_limits<size_t>::max() / es - d) {
      return InvalidArgument("all_to_allv: %s[%d] = %zu + %s[%d] = %zu elements of %s overflows size_t", displs_name,
                             q, d, counts_name, q, c, Name(t));
    }
    if (c == 0) continue;
    spans.push_back({d, d + c, q});
    extent = std::max(extent, (d + c) * es);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t k = 1; k < spans.size(); ++k) {
    if (spans[k].begin < spans[k - 1].end) {
      return InvalidArgument("all_to_allv: block %d ([%zu, %zu) by %s and %s) overlaps block %d ([%zu, %zu))",
                             spans[k].q, spans[k].begin, spans[k].end, displs_name, counts_name, spans[k - 1].q,
                             spans[k - 1].begin, spans[k - 1].end);
    }
  }
  return extent;
}

}  // namespace

absl::Status Communicator::AllToAllv(const void* send, const size_t* sendcounts, const size_t* sdispls, void* recv,
                                     const size_t* recvcounts, const size_t* rdispls, DataType t, void* stream) {
  RETURN_IF_ERROR(Annotate(CheckTypeOp(t, nullptr), "all_to_allv"));
  ASSIGN_OR_RETURN(const size_t send_extent, CheckBlocks("sendcounts", sendcounts, "sdispls", sdispls, size_, t));
  ASSIGN_OR_RETURN(const size_t recv_extent, CheckBlocks("recvcounts", recvcounts, "rdispls", rdispls, size_, t));
  RETURN_IF_ERROR(Annotate(CheckBuffer("sendbuf", send, send_extent), "all_to_allv"));
  RETURN_IF_ERROR(Annotate(CheckBuffer("recvbuf", recv, recv_extent), "all_to_allv"));
  if (memory() == MemKind::kHost && Overlap(send, send_extent, recv, recv_extent)) {
    return InvalidArgument("all_to_allv: sendbuf = %p and recvbuf = %p overlap (all-to-all is never in place)",
                           send, recv);
  }
  const auto n = static_cast<size_t>(size_);
  std::vector<size_t> sc(sendcounts, sendcounts + n), sd(sdispls, sdispls + n);
  std::vector<size_t> rc(recvcounts, recvcounts + n), rd(rdispls, rdispls + n);
  trace::NoteCall(send_extent / ElementSize(t), static_cast<int>(t), -1, -1);
  const fault::Call call{send, send_extent, recv, recv_extent, t, false};
  return Issue("all_to_allv", stream, fault::Hook(*this, call, [=, this](const void* s) {
    return DoAllToAllv(s, sc, sd, recv, rc, rd, t, stream);
  }));
}

absl::Status Communicator::DoSend(const void*, size_t, DataType, int, int, void*) {
  return Unsupported("send: backend %s has no point-to-point sends", Name(backend()));
}
absl::Status Communicator::DoRecv(void*, size_t, DataType, int, int, int*, void*) {
  return Unsupported("recv: backend %s has no point-to-point receives", Name(backend()));
}
absl::Status Communicator::DoReduce(const void*, void*, size_t, DataType, RedOp, int, void*) {
  return Unsupported("reduce: backend %s has no rooted reduce", Name(backend()));
}
absl::Status Communicator::DoGather(const void*, void*, size_t, DataType, int, void*) {
  return Unsupported("gather: backend %s has no gather", Name(backend()));
}
absl::Status Communicator::DoScatter(const void*, void*, size_t, DataType, int, void*) {
  return Unsupported("scatter: backend %s has no scatter", Name(backend()));
}
absl::Status Communicator::DoAllToAllv(const void*, const std::vector<size_t>&, const std::vector<size_t>&, void*,
                                       const std::vector<size_t>&, const std::vector<size_t>&, DataType, void*) {
  return Unsupported("all_to_all: backend %s has no all-to-all", Name(backend()));
}

}  // namespace weft
