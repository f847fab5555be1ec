// Names of weft's data types, reduction ops and backends as weft-bench
// spells them, and their raw-MPI equivalents for the baseline.
//
// Tables print nccl-tests' type names ("float", "half", "bfloat16", ...) so
// that a weft-bench table can be set beside an nccl-tests one; the parser
// takes those and weft's own names ("float32", "float16", ...):
//
//   auto types = ParseTypes("float,bfloat16");   // {weftFloat32, weftBfloat16}
//   printf("%s\n", TypeName(weftFloat16));       // "half"
#ifndef WEFT_BENCH_TYPES_H_
#define WEFT_BENCH_TYPES_H_

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weft/weft.h"

namespace weft_bench {

const char* TypeName(weftDataType_t t);  // nccl-tests' name
size_t TypeSize(weftDataType_t t);
bool IsFloat(weftDataType_t t);
const char* OpName(weftRedOp_t op);
const char* BackendName(weftBackend_t b);

// A comma-separated list of names, or "all".
absl::StatusOr<std::vector<weftDataType_t>> ParseTypes(const std::string& list);
absl::StatusOr<std::vector<weftRedOp_t>> ParseOps(const std::string& list);
absl::StatusOr<weftBackend_t> ParseBackend(const std::string& name);

// The MPI datatype moving `t` unchanged. `reduce`: one MPI can also reduce;
// MPI has none for float16 and bfloat16, so those return false there (and
// are copied as MPI_UINT16_T otherwise).
bool MpiType(weftDataType_t t, bool reduce, MPI_Datatype* out);
// MPI has no average: the baseline of avg is MPI_SUM, which moves the same bytes.
MPI_Op MpiOp(weftRedOp_t op);

}  // namespace weft_bench

#endif  // WEFT_BENCH_TYPES_H_
