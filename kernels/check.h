// Argument checks shared by every kernel entry point: dtypes, NULL and
// misaligned pointers, overlapping source and destination, and which memory
// (host or CUDA) a call's pointers are in. Errors name the argument
// ("srcs[3].data", "dst region of srcs[5]") and its value.
//
//   RETURN_IF_ERROR(CheckTensors("srcs", srcs, /*allow_float64=*/true));
//   MemoryCheck mem;
//   for (...) mem.Add("srcs", i, srcs[i].data);
//   ASSIGN_OR_RETURN(MemKind kind, mem.Kind());
#ifndef WEFT_KERNELS_CHECK_H_
#define WEFT_KERNELS_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "kernels/plan.h"
#include "kernels/types.h"

namespace weft {
namespace kernels {

// "what" or "what[index]" (index < 0: a scalar argument).
std::string Label(const char* what, long index);

// A valid weftDataType_t among float32, float16, bfloat16 (and float64 when allowed).
absl::Status CheckDtype(const std::string& what, DataType t, bool allow_float64);
// A pointer holding `count` elements of `t`: non-NULL when count > 0, aligned to the element size.
absl::Status CheckBuffer(const std::string& what, const void* p, size_t count, DataType t);
// A flatten's or unflatten's offsets[i]: tensor i's `count` elements at
// element `offset` of the flat buffer `p` of type t must end inside the
// address space and within kMaxBufferBytes (core/limits.h).
absl::Status CheckOffset(const char* flat, const void* p, DataType t, size_t i, size_t offset, const char* tensors,
                         size_t count);
// Each tensor's dtype, count and buffer; names them what[i].dtype / .count / .data.
absl::Status CheckTensors(const char* what, absl::Span<const TensorRef> tensors, bool allow_float64);

// Byte ranges a call reads and writes; Check() refuses writes that overlap
// each other or any read. O(n) when both lists are already in address order
// (packed buckets, tensors allocated one after another) or the writes are in
// an order the thread's previous check sorted (the same tensor list again),
// O(n log n) otherwise.
// Its storage is per thread and reused, so a check of 10,000 tensors does not
// allocate: at most one OverlapCheck may be live per thread.
class OverlapCheck {
 public:
  OverlapCheck();
  void Read(const char* what, long index, const void* p, size_t bytes);
  void Write(const char* what, long index, const void* p, size_t bytes);
  // A list whose segments are already in address order and disjoint (packed
  // buckets of tensors allocated one after another) is accepted in one pass
  // without being recorded; only a list given to a fresh check may take that shortcut.
  void AddList(const SegmentList& list);
  absl::Status Check();

  struct Range {
    uintptr_t begin, end;
    const char* what;
    long index;
  };

 private:
  std::vector<Range>& reads_;
  std::vector<Range>& writes_;
};

// The memory kind shared by every pointer of a call (kernels/kernels.h
// "Memory"). With a kind the caller stated, no pointer is classified (that
// is what stating it is for): Add does nothing, and Kind() returns the
// stated kind after the checks that need no driver call.
class MemoryCheck {
 public:
  explicit MemoryCheck(std::optional<MemKind> stated = std::nullopt) : stated_(stated) {}
  void Add(const char* what, long index, const void* p);
  void AddList(const SegmentList& list);
  // kHost when no pointer was added.
  absl::StatusOr<MemKind> Kind() const;

 private:
  struct Pointer {
    const char* what = nullptr;
    long index = 0;
    const void* p = nullptr;
  };
  std::optional<MemKind> stated_;
  Pointer host_, device_;  // the first of each kind
  bool managed_ = false;
};

// The checks a copy-like kernel makes once its segments are listed: no write
// overlaps another write or a read, and every pointer is of one memory kind
// (found from the pointers, or `stated`), which is returned.
absl::StatusOr<MemKind> CheckSegments(const SegmentList& list, std::optional<MemKind> stated = std::nullopt);

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_CHECK_H_
