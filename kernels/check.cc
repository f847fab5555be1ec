#include "kernels/check.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/limits.h"
#include "core/status.h"

namespace weft {
namespace kernels {

std::string Label(const char* what, long index) {
  if (index < 0) return what;
  return absl::StrCat(what, "[", index, "]");
}

absl::Status CheckDtype(const std::string& what, DataType t, bool allow_float64) {
  if (!IsValid(t)) return InvalidArgument("%s = %d is not a valid weftDataType_t", what, static_cast<int>(t));
  const bool ok = t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBfloat16 ||
                  (allow_float64 && t == DataType::kFloat64);
  if (!ok) {
    return InvalidArgument("%s = %s is not supported here (float32, float16, bfloat16%s)", what, Name(t),
                           allow_float64 ? ", float64" : "");
  }
  return absl::OkStatus();
}

absl::Status CheckBuffer(const std::string& what, const void* p, size_t count, DataType t) {
  if (count == 0) return absl::OkStatus();
  if (p == nullptr) return InvalidArgument("%s is NULL with %zu elements to access", what, count);
  ASSIGN_OR_RETURN(const size_t bytes, CheckedBytes(what + " region", count, ElementSize(t)));
  if (bytes > UINTPTR_MAX - reinterpret_cast<uintptr_t>(p)) {
    return InvalidArgument("%s = %p with %zu elements of %s runs past the end of the address space", what, p, count,
                           Name(t));
  }
  if (reinterpret_cast<uintptr_t>(p) % ElementSize(t) != 0) {
    return InvalidArgument("%s = %p is not aligned to its element size (%zu bytes, %s)", what, p, ElementSize(t),
                           Name(t));
  }
  return absl::OkStatus();
}

namespace {

// What CheckDtype and CheckBuffer accept, without building a status: the
// loop over 10,000 tiny tensors runs this, and only a failing tensor is
// checked again to name what is wrong.
bool TensorOk(const TensorRef& t, bool allow_float64) {
  const bool dtype_ok = t.dtype == DataType::kFloat32 || t.dtype == DataType::kFloat16 ||
                        t.dtype == DataType::kBfloat16 || (allow_float64 && t.dtype == DataType::kFloat64);
  const bool data_ok = t.data != nullptr && reinterpret_cast<uintptr_t>(t.data) % FloatSize(t.dtype) == 0 &&
                       t.count <= kMaxBufferBytes / FloatSize(t.dtype) &&
                       t.count * FloatSize(t.dtype) <= UINTPTR_MAX - reinterpret_cast<uintptr_t>(t.data);
  return dtype_ok && (t.count == 0 || data_ok);
}

}  // namespace

absl::Status CheckTensors(const char* what, absl::Span<const TensorRef> tensors, bool allow_float64) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (TensorOk(tensors[i], allow_float64)) continue;
    const std::string name = Label(what, static_cast<long>(i));
    RETURN_IF_ERROR(CheckDtype(name + ".dtype", tensors[i].dtype, allow_float64));
    RETURN_IF_ERROR(CheckedBytes(name + ".count", tensors[i].count, ElementSize(tensors[i].dtype)).status());
    RETURN_IF_ERROR(CheckBuffer(name + ".data", tensors[i].data, tensors[i].count, tensors[i].dtype));
  }
  return absl::OkStatus();
}

absl::Status CheckOffset(const char* flat, const void* p, DataType t, size_t i, size_t offset, const char* tensors,
                         size_t count) {
  const size_t limit = kMaxBufferBytes / ElementSize(t);
  if (count <= limit && offset <= limit - count &&
      (offset + count) * ElementSize(t) <= UINTPTR_MAX - reinterpret_cast<uintptr_t>(p)) {
    return absl::OkStatus();
  }
  return InvalidArgument("offsets[%zu] = %zu with %s[%zu].count = %zu reaches past the end of any %s buffer (%s = "
                         "%p, elements of %s)", i, offset, tensors, i, count, flat, flat, p, Name(t));
}

namespace {

struct OverlapScratch {
  std::vector<OverlapCheck::Range> reads, writes;
  // SortWrites' state: the permutation that last put this thread's writes in
  // address order, and room to sort and reorder into.
  std::vector<uint32_t> order;
  std::vector<std::pair<uintptr_t, uint32_t>> keys;
  std::vector<OverlapCheck::Range> sorted;
};
OverlapScratch& Scratch() {
  thread_local OverlapScratch scratch;
  return scratch;
}

bool ByBegin(const OverlapCheck::Range& a, const OverlapCheck::Range& b) { return a.begin < b.begin; }

// Puts `writes` (this thread's scratch) in address order. One-shot calls of
// a thread mostly repeat one tensor list (every training step's), whose
// tensors sit in the same, unsorted, places each time: the order the last
// sort found is tried first, and kept when one pass shows it sorts these
// writes too (an O(n) reorder instead of an O(n log n) sort). Otherwise the
// addresses are sorted as compact (address, index) keys, not as Ranges.
void SortWrites(std::vector<OverlapCheck::Range>& writes, OverlapScratch& s) {
  const size_t n = writes.size();
  if (n > UINT32_MAX) {
    std::sort(writes.begin(), writes.end(), ByBegin);
    return;
  }
  bool reuse = s.order.size() == n;  // a permutation of [0, n) whenever its size is n
  for (size_t k = 1; reuse && k < n; ++k) reuse = writes[s.order[k - 1]].begin <= writes[s.order[k]].begin;
  if (!reuse) {
    s.keys.resize(n);
    for (size_t k = 0; k < n; ++k) s.keys[k] = {writes[k].begin, static_cast<uint32_t>(k)};
    std::sort(s.keys.begin(), s.keys.end());
    s.order.resize(n);
    for (size_t k = 0; k < n; ++k) s.order[k] = s.keys[k].second;
  }
  s.sorted.resize(n);
  for (size_t k = 0; k < n; ++k) s.sorted[k] = writes[s.order[k]];
  writes.swap(s.sorted);
}

absl::Status Overlap(const OverlapCheck::Range& a, const OverlapCheck::Range& b) {
  return InvalidArgument("%s (%#x..%#x) overlaps %s (%#x..%#x)", Label(a.what, a.index), a.begin, a.end,
                         Label(b.what, b.index), b.begin, b.end);
}

}  // namespace

OverlapCheck::OverlapCheck() : reads_(Scratch().reads), writes_(Scratch().writes) {
  reads_.clear();
  writes_.clear();
}

void OverlapCheck::Read(const char* what, long index, const void* p, size_t bytes) {
  if (bytes == 0 || p == nullptr) return;
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  reads_.push_back({b, b + bytes, what, index});
}

void OverlapCheck::Write(const char* what, long index, const void* p, size_t bytes) {
  if (bytes == 0 || p == nullptr) return;
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  writes_.push_back({b, b + bytes, what, index});
}

namespace {

uintptr_t Begin(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// The common cases without copying a range: destinations in segment order
// are ascending and disjoint (a flatten's packed bucket), and the sources
// (zero fills have none) either lie outside the destinations' hull (tensors
// allocated anywhere but in the bucket) or are ascending too, when one merge
// walk over the segments decides. False: look closer.
bool OrderedAndDisjoint(const SegmentList& list) {
  const std::vector<Segment>& seg = list.segments;
  uintptr_t last_dst = 0, last_src = 0;
  bool srcs_ordered = true;
  for (const Segment& s : seg) {
    const uintptr_t d = Begin(s.dst);
    if (d < last_dst) return false;
    last_dst = d + s.count * FloatSize(s.dst_t);
    if (s.src == nullptr) continue;
    srcs_ordered &= Begin(s.src) >= last_src;
    last_src = Begin(s.src) + s.count * FloatSize(s.src_t);
  }
  if (seg.empty()) return true;
  if (!srcs_ordered) {
    const uintptr_t lo = Begin(seg.front().dst), hi = last_dst;
    for (const Segment& s : seg) {
      if (s.src == nullptr) continue;
      const uintptr_t b = Begin(s.src), e = b + s.count * FloatSize(s.src_t);
      if (e > lo && b < hi) return false;
    }
    return true;
  }
  size_t w = 0;
  for (const Segment& r : seg) {
    if (r.src == nullptr) continue;
    const uintptr_t rb = Begin(r.src), re = rb + r.count * FloatSize(r.src_t);
    while (w < seg.size() && Begin(seg[w].dst) + seg[w].count * FloatSize(seg[w].dst_t) <= rb) ++w;
    if (w < seg.size() && Begin(seg[w].dst) < re) return false;
  }
  return true;
}

}  // namespace

void OverlapCheck::AddList(const SegmentList& list) {
  if (reads_.empty() && writes_.empty() && OrderedAndDisjoint(list)) return;
  reads_.reserve(reads_.size() + list.segments.size());
  writes_.reserve(writes_.size() + list.segments.size());
  for (size_t k = 0; k < list.segments.size(); ++k) {
    const Segment& s = list.segments[k];
    Read(list.src_label, list.tensor[k], s.src, s.count * FloatSize(s.src_t));
    Write(list.dst_label, list.tensor[k], s.dst, s.count * FloatSize(s.dst_t));
  }
}

absl::Status OverlapCheck::Check() {
  if (!std::is_sorted(writes_.begin(), writes_.end(), ByBegin)) SortWrites(writes_, Scratch());
  for (size_t k = 1; k < writes_.size(); ++k) {
    if (writes_[k].begin < writes_[k - 1].end) return Overlap(writes_[k], writes_[k - 1]);
  }
  // Writes are now disjoint and sorted by address.
  if (std::is_sorted(reads_.begin(), reads_.end(), ByBegin)) {
    // Merge walk: a write that ends before one read begins ends before every later read too.
    size_t w = 0;
    for (const Range& r : reads_) {
      while (w < writes_.size() && writes_[w].end <= r.begin) ++w;
      if (w < writes_.size() && writes_[w].begin < r.end) return Overlap(r, writes_[w]);
    }
    return absl::OkStatus();
  }
  // Only the last write starting before a read's end can overlap it. Reads
  // outside the writes' hull (a packed bucket's sources, usually) skip the search.
  const uintptr_t lo = writes_.empty() ? 0 : writes_.front().begin;
  const uintptr_t hi = writes_.empty() ? 0 : writes_.back().end;
  for (const Range& r : reads_) {
    if (r.end <= lo || r.begin >= hi) continue;
    auto it = std::lower_bound(writes_.begin(), writes_.end(), Range{r.end, r.end, nullptr, 0}, ByBegin);
    if (it != writes_.begin() && std::prev(it)->end > r.begin) return Overlap(r, *std::prev(it));
  }
  return absl::OkStatus();
}

void MemoryCheck::Add(const char* what, long index, const void* p) {
  if (p == nullptr || stated_.has_value()) return;
  switch (ClassifyPointer(p)) {
    case PointerKind::kHost:
      if (host_.p == nullptr) host_ = {what, index, p};
      break;
    case PointerKind::kDevice:
      if (device_.p == nullptr) device_ = {what, index, p};
      break;
    case PointerKind::kManaged:
      managed_ = true;
      break;
  }
}

void MemoryCheck::AddList(const SegmentList& list) {
  // Classifying a pointer can cost a driver call: the tensors' side pointer by
  // pointer, the flat side (one buffer) once.
  for (size_t k = 0; k < list.segments.size(); ++k) {
    if (list.flat_is_src) {
      Add(list.dst_label, list.tensor[k], list.segments[k].dst);
    } else {
      Add(list.src_label, list.tensor[k], list.segments[k].src);
    }
  }
  if (!list.segments.empty()) Add(list.flat_label, -1, list.flat);
}

absl::StatusOr<MemKind> CheckSegments(const SegmentList& list, std::optional<MemKind> stated) {
  OverlapCheck overlap;
  overlap.AddList(list);
  RETURN_IF_ERROR(overlap.Check());
  MemoryCheck memory(stated);
  memory.AddList(list);
  return memory.Kind();
}

absl::StatusOr<MemKind> MemoryCheck::Kind() const {
  if (stated_.has_value()) {
    // A CUDA pointer exists only once something loaded the driver; asking
    // whether one did costs no driver call (core/memory.h).
    if (*stated_ == MemKind::kCuda && !CudaDriverLoaded()) {
      return InvalidArgument("config->memory = weftMemoryCuda, but no CUDA driver is loaded in this process, so no "
                             "pointer can be CUDA memory");
    }
    return *stated_;
  }
  if (host_.p != nullptr && device_.p != nullptr) {
    return InvalidArgument("mixed memory kinds: %s = %p is host memory but %s = %p is CUDA device memory",
                           Label(host_.what, host_.index), host_.p, Label(device_.what, device_.index), device_.p);
  }
  if (device_.p != nullptr || (managed_ && host_.p == nullptr)) return MemKind::kCuda;
  return MemKind::kHost;
}

}  // namespace kernels
}  // namespace weft
