#include "kernels/check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace weft {
namespace kernels {

std::string Label(std::string_view what, long index) {
  if (index < 0) return std::string(what);
  return absl::StrCat(std::string(what), "[", index, "]");
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
  if (reinterpret_cast<uintptr_t>(p) % ElementSize(t) != 0) {
    return InvalidArgument("%s = %p is not aligned to its element size (%zu bytes, %s)", what, p, ElementSize(t),
                           Name(t));
  }
  return absl::OkStatus();
}

absl::Status CheckTensors(const char* what, absl::Span<const TensorRef> tensors, bool allow_float64) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = Label(what, static_cast<long>(i));
    RETURN_IF_ERROR(CheckDtype(name + ".dtype", tensors[i].dtype, allow_float64));
    RETURN_IF_ERROR(CheckBuffer(name + ".data", tensors[i].data, tensors[i].count, tensors[i].dtype));
  }
  return absl::OkStatus();
}

void OverlapCheck::Read(std::string_view what, long index, const void* p, size_t bytes) {
  if (bytes == 0 || p == nullptr) return;
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  reads_.push_back({b, b + bytes, what, index});
}

void OverlapCheck::Write(std::string_view what, long index, const void* p, size_t bytes) {
  if (bytes == 0 || p == nullptr) return;
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  writes_.push_back({b, b + bytes, what, index});
}

void OverlapCheck::AddPlan(const CopyPlan& plan) {
  for (size_t k = 0; k < plan.segments.size(); ++k) {
    const Segment& s = plan.segments[k];
    Read(plan.src_label, plan.tensor[k], s.src, s.count * ElementSize(s.src_t));
    Write(plan.dst_label, plan.tensor[k], s.dst, s.count * ElementSize(s.dst_t));
  }
}

absl::Status OverlapCheck::Check() {
  auto by_begin = [](const Range& a, const Range& b) { return a.begin < b.begin; };
  std::sort(writes_.begin(), writes_.end(), by_begin);
  auto overlap = [](const Range& a, const Range& b) {
    return InvalidArgument("%s (%#x..%#x) overlaps %s (%#x..%#x)", Label(a.what, a.index), a.begin, a.end,
                           Label(b.what, b.index), b.begin, b.end);
  };
  for (size_t k = 1; k < writes_.size(); ++k) {
    if (writes_[k].begin < writes_[k - 1].end) return overlap(writes_[k], writes_[k - 1]);
  }
  // Writes are now disjoint and sorted: only the last one starting before a
  // read's end can overlap it.
  for (const Range& r : reads_) {
    auto it = std::lower_bound(writes_.begin(), writes_.end(), Range{r.end, r.end, {}, 0}, by_begin);
    if (it != writes_.begin() && std::prev(it)->end > r.begin) return overlap(r, *std::prev(it));
  }
  return absl::OkStatus();
}

void MemoryCheck::Add(std::string_view what, long index, const void* p) {
  if (p == nullptr) return;
  entries_.push_back({what, index, p, ClassifyPointer(p)});
}

void MemoryCheck::AddPlan(const CopyPlan& plan) {
  for (size_t k = 0; k < plan.segments.size(); ++k) {
    Add(plan.src_label, plan.tensor[k], plan.segments[k].src);
    Add(plan.dst_label, plan.tensor[k], plan.segments[k].dst);
  }
}

absl::StatusOr<MemKind> MemoryCheck::Kind() const {
  const Entry* host = nullptr;
  const Entry* device = nullptr;
  bool managed = false;
  for (const Entry& e : entries_) {
    if (e.kind == PointerKind::kHost && host == nullptr) host = &e;
    if (e.kind == PointerKind::kDevice && device == nullptr) device = &e;
    managed |= e.kind == PointerKind::kManaged;
  }
  if (host != nullptr && device != nullptr) {
    return InvalidArgument("mixed memory kinds: %s = %p is host memory but %s = %p is CUDA device memory",
                           Label(host->what, host->index), host->p, Label(device->what, device->index), device->p);
  }
  if (device != nullptr || (managed && host == nullptr)) return MemKind::kCuda;
  return MemKind::kHost;
}

}  // namespace kernels
}  // namespace weft
