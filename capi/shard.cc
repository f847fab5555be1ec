// Shard group entry points (include/weft/weft.h, "sharding").
#include <memory>
#include <string>
#include <vector>

#include "capi/export.h"
#include "capi/handles.h"
#include "capi/result.h"
#include "capi/shard_handle.h"
#include "shard/shard_group.h"

namespace weft {
namespace capi {
namespace {

using shard::ShardGroup;

absl::Status CheckCount(const char* what, int n, const ShardGroup& g) {
  if (n < 0 || static_cast<size_t>(n) != g.layout().numel.size()) {
    return InvalidArgument("n = %d, but the group has %zu parameters (%s)", n, g.layout().numel.size(), what);
  }
  return absl::OkStatus();
}

absl::StatusOr<shard::ShardGroupOptions> ReadGroupConfig(const weftShardGroupConfig_t* config) {
  weftShardGroupConfig_t c = WEFT_SHARD_GROUP_CONFIG_INITIALIZER;
  if (config != nullptr) RETURN_IF_ERROR(ReadSized("config", config, &c));
  const int layout = EnumValue(c.layout), reduction = EnumValue(c.reduction);
  const int param_dtype = EnumValue(c.param_dtype), reduce_dtype = EnumValue(c.reduce_dtype);
  if (layout < 0 || layout >= weftNumShardLayouts) {
    return InvalidArgument("config->layout = %d is not a weftShardLayout_t", layout);
  }
  if (reduction < 0 || reduction >= weftNumGradReductions) {
    return InvalidArgument("config->reduction = %d is not a weftGradReduction_t", reduction);
  }
  if (param_dtype < 0 || param_dtype >= weftNumTypes) {
    return InvalidArgument("config->param_dtype = %d is not a weftDataType_t", param_dtype);
  }
  if (reduce_dtype < 0 || reduce_dtype >= weftNumTypes) {
    return InvalidArgument("config->reduce_dtype = %d is not a weftDataType_t", reduce_dtype);
  }
  shard::ShardGroupOptions o;
  o.layout = static_cast<shard::LayoutKind>(layout);
  o.param_dtype = static_cast<DataType>(param_dtype);
  o.reduce_dtype = static_cast<DataType>(reduce_dtype);
  o.reduction = static_cast<shard::GradReduction>(reduction);
  return o;
}

absl::StatusOr<std::vector<shard::ParamSpec>> ReadParams(const weftParamDesc_t* params, int n) {
  if (n < 0) return InvalidArgument("n = %d is negative", n);
  if (n > 0 && params == nullptr) return InvalidArgument("params is NULL with n = %d", n);
  std::vector<shard::ParamSpec> specs(n);
  for (int i = 0; i < n; ++i) {
    const weftParamDesc_t& d = params[i];
    if (d.ndim < 0 || d.ndim > WEFT_MAX_DIMS) {
      return InvalidArgument("params[%d].ndim = %d is outside [0, %d]", i, d.ndim, WEFT_MAX_DIMS);
    }
    specs[i].name = d.name != nullptr ? d.name : "";
    specs[i].shape.assign(d.shape, d.shape + d.ndim);
  }
  return specs;
}

}  // namespace

absl::StatusOr<std::vector<kernels::TensorRef>> ReadGrads(const ShardGroup& g, const weftTensor_t* grads, int n) {
  RETURN_IF_ERROR(CheckCount("grads", n, g));
  if (n > 0 && grads == nullptr) return InvalidArgument("grads is NULL with n = %d", n);
  std::vector<kernels::TensorRef> refs(n);
  for (int i = 0; i < n; ++i) {
    const int dtype = EnumValue(grads[i].dtype);
    if (dtype < 0 || dtype >= weftNumTypes) {
      return InvalidArgument("grads[%d].dtype = %d is not a weftDataType_t", i, dtype);
    }
    refs[i] = {grads[i].data, grads[i].count, static_cast<DataType>(dtype)};
  }
  return refs;
}

}  // namespace capi
}  // namespace weft

using weft::capi::Guard;
using weft::capi::GetGroup;

WEFT_API weftResult_t weftShardGroupCreate(weftComm_t comm, weftComm_t replicas, const weftParamDesc_t* params,
                                           int n, const weftShardGroupConfig_t* config, weftShardGroup_t* group) {
  return Guard("weftShardGroupCreate", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    weft::Communicator* r = nullptr;
    if (replicas != nullptr) {
      ASSIGN_OR_RETURN(r, weft::capi::GetComm("replicas", replicas));
    }
    if (group == nullptr) return weft::InvalidArgument("group is NULL");
    ASSIGN_OR_RETURN(const auto options, weft::capi::ReadGroupConfig(config));
    ASSIGN_OR_RETURN(const auto specs, weft::capi::ReadParams(params, n));
    ASSIGN_OR_RETURN(auto impl, weft::shard::ShardGroup::Create(c, r, specs, options, comm->pool.get()));
    *group = new weftShardGroup{comm->pool, std::move(impl), comm};
    weft::capi::Live<weftShardGroup>::Add(*group);
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardGroupDestroy(weftShardGroup_t group) {
  return Guard("weftShardGroupDestroy", [&]() -> absl::Status {
    // Also once its communicator is gone: the group holds the pool its buffers came from.
    RETURN_IF_ERROR(weft::capi::Live<weftShardGroup>::Check("group", group));
    weft::capi::Live<weftShardGroup>::Remove(group);
    delete group;
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardGroupGetShard(weftShardGroup_t group, int param, weftShardDesc_t* desc) {
  return Guard("weftShardGroupGetShard", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    if (desc == nullptr) return weft::InvalidArgument("desc is NULL");
    if (param < 0 || static_cast<size_t>(param) >= g->shards().size()) {
      return weft::InvalidArgument("param = %d is outside [0, %zu)", param, g->shards().size());
    }
    const auto& s = g->shards()[param];
    *desc = {s.param_offset, s.length, s.shard_offset};
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardGroupGetBuffers(weftShardGroup_t group, float** params, float** grads,
                                               size_t* count) {
  return Guard("weftShardGroupGetBuffers", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    if (params != nullptr) *params = g->master().data();
    if (grads != nullptr) *grads = g->grads().data();
    if (count != nullptr) *count = g->master().size();
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardGroupLoadFull(weftShardGroup_t group, const float* const* full, int n) {
  return Guard("weftShardGroupLoadFull", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    RETURN_IF_ERROR(weft::capi::CheckCount("full", n, *g));
    if (n > 0 && full == nullptr) return weft::InvalidArgument("full is NULL with n = %d", n);
    return g->LoadFromFull({full, static_cast<size_t>(n)});
  });
}

WEFT_API weftResult_t weftShardGroupUnshard(weftShardGroup_t group, void* stream) {
  return Guard("weftShardGroupUnshard", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    return g->Unshard(stream);
  });
}

WEFT_API weftResult_t weftShardGroupUnshardInto(weftShardGroup_t group, void* full, void* stream) {
  return Guard("weftShardGroupUnshardInto", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    return g->UnshardInto(full, stream);
  });
}

WEFT_API weftResult_t weftShardGroupGetFullLayout(weftShardGroup_t group, size_t* numel, size_t* offsets, int n) {
  return Guard("weftShardGroupGetFullLayout", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    if (numel == nullptr) return weft::InvalidArgument("numel is NULL");
    if (offsets != nullptr) RETURN_IF_ERROR(weft::capi::CheckCount("offsets", n, *g));
    *numel = g->full_numel();
    for (int i = 0; offsets != nullptr && i < n; ++i) offsets[i] = g->full_offset(i);
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardGroupGetFullParam(weftShardGroup_t group, int param, void** data) {
  return Guard("weftShardGroupGetFullParam", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    if (data == nullptr) return weft::InvalidArgument("data is NULL");
    ASSIGN_OR_RETURN(*data, g->FullParam(param));
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardGroupReshard(weftShardGroup_t group) {
  return Guard("weftShardGroupReshard", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    return g->Reshard();
  });
}

WEFT_API weftResult_t weftShardGroupReduceGrads(weftShardGroup_t group, const weftTensor_t* grads, int n,
                                                void* stream) {
  return Guard("weftShardGroupReduceGrads", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    ASSIGN_OR_RETURN(const auto refs, weft::capi::ReadGrads(*g, grads, n));
    return g->ReduceGrads(refs, stream);
  });
}

WEFT_API weftResult_t weftShardGroupReduceGradsFlat(weftShardGroup_t group, void* grads, weftDataType_t dtype,
                                                    void* stream) {
  return Guard("weftShardGroupReduceGradsFlat", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    const int t = weft::capi::EnumValue(dtype);
    if (t < 0 || t >= weftNumTypes) return weft::InvalidArgument("dtype = %d is not a weftDataType_t", t);
    return g->ReduceGradsFlat(grads, static_cast<weft::DataType>(t), stream);
  });
}

WEFT_API weftResult_t weftShardGroupZeroGrads(weftShardGroup_t group) {
  return Guard("weftShardGroupZeroGrads", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    return g->ZeroGrads();
  });
}

WEFT_API weftResult_t weftShardGroupGatherFull(weftShardGroup_t group, int root, float* const* out, int n) {
  return Guard("weftShardGroupGatherFull", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    return g->GatherFull(root, {out, out == nullptr ? 0 : static_cast<size_t>(n < 0 ? 0 : n)});
  });
}

WEFT_API weftResult_t weftShardGroupScatterFull(weftShardGroup_t group, int root, const float* const* full,
                                                int n) {
  return Guard("weftShardGroupScatterFull", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    return g->ScatterFull(root, {full, full == nullptr ? 0 : static_cast<size_t>(n < 0 ? 0 : n)});
  });
}

WEFT_API weftResult_t weftShardGroupGetMemory(weftShardGroup_t group, weftShardMemory_t* memory) {
  return Guard("weftShardGroupGetMemory", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    if (memory == nullptr) return weft::InvalidArgument("memory is NULL");
    const auto m = g->memory();
    const auto p = group->pool->stats();
    *memory = {m.shard_bytes, m.grad_shard_bytes, m.unsharded_bytes, p.live_bytes, p.pooled_bytes,
               p.peak_live_bytes};
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardGroupGatherFullFrom(weftShardGroup_t group, const float* shard, int root,
                                                   float* const* out, int n) {
  return Guard("weftShardGroupGatherFullFrom", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    if (shard == nullptr && !g->master().empty()) return weft::InvalidArgument("shard is NULL");
    return g->GatherFull(root, {out, out == nullptr ? 0 : static_cast<size_t>(n < 0 ? 0 : n)}, shard);
  });
}

WEFT_API weftResult_t weftShardGroupScatterFullInto(weftShardGroup_t group, int root, const float* const* full,
                                                    int n, float* shard) {
  return Guard("weftShardGroupScatterFullInto", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* g, GetGroup("group", group));
    if (shard == nullptr && !g->master().empty()) return weft::InvalidArgument("shard is NULL");
    return g->ScatterFull(root, {full, full == nullptr ? 0 : static_cast<size_t>(n < 0 ? 0 : n)}, shard);
  });
}
