#include "bench/types.h"

#include <utility>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace weft_bench {
namespace {

struct TypeEntry {
  weftDataType_t type;
  const char* name;  // nccl-tests'
  size_t size;
  std::vector<const char*> aliases;
};

const std::vector<TypeEntry>& Types() {
  static const std::vector<TypeEntry> kTypes = {
      {weftInt8, "int8", 1, {"int8", "char"}},
      {weftUint8, "uint8", 1, {"uint8"}},
      {weftInt16, "int16", 2, {"int16", "short"}},  // not an nccl-tests type: NCCL has none
      {weftInt32, "int32", 4, {"int32", "int"}},
      {weftInt64, "int64", 8, {"int64"}},
      {weftFloat16, "half", 2, {"half", "float16", "fp16"}},
      {weftFloat32, "float", 4, {"float", "float32", "fp32"}},
      {weftFloat64, "double", 8, {"double", "float64", "fp64"}},
      {weftBfloat16, "bfloat16", 2, {"bfloat16", "bf16"}},
  };
  return kTypes;
}

const TypeEntry* FindType(weftDataType_t t) {
  for (const TypeEntry& e : Types()) {
    if (e.type == t) return &e;
  }
  return nullptr;
}

constexpr std::pair<weftRedOp_t, const char*> kOps[] = {
    {weftSum, "sum"}, {weftProd, "prod"}, {weftMax, "max"}, {weftMin, "min"}, {weftAvg, "avg"}};

constexpr std::pair<weftBackend_t, const char*> kBackends[] = {
    {weftBackendAuto, "auto"}, {weftBackendInProcess, "inprocess"}, {weftBackendMpi, "mpi"},
    {weftBackendNccl, "nccl"}, {weftBackendUcx, "ucx"}};

}  // namespace

const char* TypeName(weftDataType_t t) {
  const TypeEntry* e = FindType(t);
  return e != nullptr ? e->name : "invalid";
}

size_t TypeSize(weftDataType_t t) {
  const TypeEntry* e = FindType(t);
  return e != nullptr ? e->size : 0;
}

bool IsFloat(weftDataType_t t) {
  return t == weftFloat16 || t == weftBfloat16 || t == weftFloat32 || t == weftFloat64;
}

const char* OpName(weftRedOp_t op) {
  for (const auto& [o, name] : kOps) {
    if (o == op) return name;
  }
  return "invalid";
}

const char* BackendName(weftBackend_t b) {
  for (const auto& [id, name] : kBackends) {
    if (id == b) return name;
  }
  return "invalid";
}

absl::StatusOr<std::vector<weftDataType_t>> ParseTypes(const std::string& list) {
  std::vector<weftDataType_t> out;
  if (list == "all") {
    for (const TypeEntry& e : Types()) out.push_back(e.type);
    return out;
  }
  for (absl::string_view word : absl::StrSplit(list, ',')) {
    const TypeEntry* found = nullptr;
    for (const TypeEntry& e : Types()) {
      for (const char* alias : e.aliases) {
        if (word == alias) found = &e;
      }
    }
    if (found == nullptr) {
      std::vector<std::string> names;
      for (const TypeEntry& e : Types()) names.push_back(absl::StrJoin(e.aliases, "|"));
      return weft::InvalidArgument("-d: datatype '%s' is not one of %s, all", std::string(word),
                                   absl::StrJoin(names, ", "));
    }
    out.push_back(found->type);
  }
  return out;
}

absl::StatusOr<std::vector<weftRedOp_t>> ParseOps(const std::string& list) {
  std::vector<weftRedOp_t> out;
  if (list == "all") {
    for (const auto& [op, name] : kOps) out.push_back(op);
    return out;
  }
  for (absl::string_view word : absl::StrSplit(list, ',')) {
    bool found = false;
    for (const auto& [op, name] : kOps) {
      if (word == name) {
        out.push_back(op);
        found = true;
      }
    }
    if (!found) return weft::InvalidArgument("-o: op '%s' is not one of sum, prod, max, min, avg, all", std::string(word));
  }
  return out;
}

absl::StatusOr<weftBackend_t> ParseBackend(const std::string& name) {
  for (const auto& [id, n] : kBackends) {
    if (name == n) return id;
  }
  if (name == "in-process") return weftBackendInProcess;
  return weft::InvalidArgument("--backend: '%s' is not one of auto, inprocess, mpi, nccl, ucx", name);
}

bool MpiType(weftDataType_t t, bool reduce, MPI_Datatype* out) {
  switch (t) {
    case weftFloat32: *out = MPI_FLOAT; return true;
    case weftFloat64: *out = MPI_DOUBLE; return true;
    case weftInt8: *out = MPI_INT8_T; return true;
    case weftUint8: *out = MPI_UINT8_T; return true;
    case weftInt16: *out = MPI_INT16_T; return true;
    case weftInt32: *out = MPI_INT32_T; return true;
    case weftInt64: *out = MPI_INT64_T; return true;
    case weftFloat16:
    case weftBfloat16:
      if (reduce) return false;
      *out = MPI_UINT16_T;
      return true;
    default: return false;
  }
}

MPI_Op MpiOp(weftRedOp_t op) {
  switch (op) {
    case weftProd: return MPI_PROD;
    case weftMax: return MPI_MAX;
    case weftMin: return MPI_MIN;
    default: return MPI_SUM;
  }
}

}  // namespace weft_bench
