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
#include <string>
#include <string_view>
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
std::string Label(std::string_view what, long index);

// A valid weftDataType_t among float32, float16, bfloat16 (and float64 when allowed).
absl::Status CheckDtype(const std::string& what, DataType t, bool allow_float64);
// A pointer holding `count` elements of `t`: non-NULL when count > 0, aligned to the element size.
absl::Status CheckBuffer(const std::string& what, const void* p, size_t count, DataType t);
// Each tensor's dtype and buffer; names them what[i].dtype / what[i].data.
absl::Status CheckTensors(const char* what, absl::Span<const TensorRef> tensors, bool allow_float64);

// Byte ranges a call reads and writes; Check() refuses writes that overlap
// each other or any read.
class OverlapCheck {
 public:
  void Read(std::string_view what, long index, const void* p, size_t bytes);
  void Write(std::string_view what, long index, const void* p, size_t bytes);
  void AddPlan(const CopyPlan& plan);
  absl::Status Check();

 private:
  struct Range {
    uintptr_t begin, end;
    std::string_view what;
    long index;
  };
  std::vector<Range> reads_, writes_;
};

// The memory kind shared by every pointer of a call (kernels/kernels.h "Memory").
class MemoryCheck {
 public:
  void Add(std::string_view what, long index, const void* p);
  void AddPlan(const CopyPlan& plan);
  // kHost when no pointer was added.
  absl::StatusOr<MemKind> Kind() const;

 private:
  struct Entry {
    std::string_view what;
    long index;
    const void* p;
    PointerKind kind;
  };
  std::vector<Entry> entries_;
};

}  // namespace kernels
}  // namespace weft

#endif  // WEFT_KERNELS_CHECK_H_
