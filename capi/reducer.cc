// Reducer entry points (weft.h, "DDP reducer"): argument checks and the
// config struct here, the work in shard/reducer.
#include <memory>
#include <vector>

#include "capi/export.h"
#include "capi/handles.h"
#include "capi/result.h"
#include "core/status.h"
#include "shard/reducer.h"

struct weftReducer {
  std::unique_ptr<weft::shard::Reducer> impl;
  weftComm_t comm;  // what impl reduces over: checked before every use
};

namespace weft {
namespace capi {
namespace {

absl::StatusOr<shard::ReducerOptions> ReadReducerConfig(const weftReducerConfig_t* config) {
  weftReducerConfig_t c = WEFT_REDUCER_CONFIG_INITIALIZER;
  if (config != nullptr) RETURN_IF_ERROR(ReadSized("config", config, &c));
  shard::ReducerOptions o;
  o.bucket_cap_bytes = c.bucket_cap_bytes;
  o.first_bucket_cap_bytes = c.first_bucket_cap_bytes;
  if (c.comm_dtype != WEFT_REDUCER_COMM_DTYPE_NATIVE) {
    if (c.comm_dtype != weftFloat16 && c.comm_dtype != weftBfloat16) {
      return InvalidArgument("config->comm_dtype = %d (expected WEFT_REDUCER_COMM_DTYPE_NATIVE = -1, "
                             "weftFloat16 = %d or weftBfloat16 = %d)", c.comm_dtype, weftFloat16, weftBfloat16);
    }
    o.comm_dtype = static_cast<DataType>(c.comm_dtype);
  }
  o.find_unused = c.find_unused != 0;
  o.static_graph = c.static_graph != 0;
  o.rebuild_buckets = c.rebuild_buckets != 0;
  o.gradient_as_bucket_view = c.gradient_as_bucket_view != 0;
  return o;
}

absl::StatusOr<shard::Reducer*> GetReducer(weftReducer_t r) {
  RETURN_IF_ERROR(Live<weftReducer>::Check("reducer", r));
  RETURN_IF_ERROR(CheckOwner(absl::StrFormat("reducer = %p", static_cast<const void*>(r)), r->comm));
  return r->impl.get();
}

}  // namespace
}  // namespace capi
}  // namespace weft

using weft::capi::Guard;

WEFT_API weftResult_t weftReducerCreate(weftComm_t comm, const weftTensor_t* grads, int n,
                                        const weftReducerConfig_t* config, weftReducer_t* reducer) {
  return Guard("weftReducerCreate", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    if (reducer == nullptr) return weft::InvalidArgument("reducer is NULL");
    *reducer = nullptr;
    if (n < 0) return weft::InvalidArgument("n = %d is negative", n);
    if (grads == nullptr && n > 0) return weft::InvalidArgument("grads is NULL for n = %d", n);
    ASSIGN_OR_RETURN(const weft::shard::ReducerOptions options, weft::capi::ReadReducerConfig(config));
    std::vector<weft::shard::GradSpec> specs(n);
    for (int i = 0; i < n; ++i) {
      specs[i].count = grads[i].count;
      specs[i].dtype = static_cast<weft::DataType>(weft::capi::EnumValue(grads[i].dtype));
      if (config != nullptr && config->size >= offsetof(weftReducerConfig_t, names) + sizeof(config->names) &&
          config->names != nullptr && config->names[i] != nullptr) {
        specs[i].name = config->names[i];
      }
    }
    // Argument errors found after this point are shared with the other ranks
    // by Create's cross-rank check, so nobody is left waiting.
    ASSIGN_OR_RETURN(auto impl, weft::shard::Reducer::Create(c, std::move(specs), options));
    auto* h = new weftReducer{std::move(impl), comm};
    weft::capi::Live<weftReducer>::Add(h);
    *reducer = h;
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftReducerMarkReady(weftReducer_t reducer, int index, void* grad, void* stream) {
  return Guard("weftReducerMarkReady", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::shard::Reducer * r, weft::capi::GetReducer(reducer));
    return r->MarkReady(index, grad, stream);
  });
}

WEFT_API weftResult_t weftReducerMarkUnused(weftReducer_t reducer, int index) {
  return Guard("weftReducerMarkUnused", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::shard::Reducer * r, weft::capi::GetReducer(reducer));
    return r->MarkUnused(index);
  });
}

WEFT_API weftResult_t weftReducerFinalize(weftReducer_t reducer, void* stream) {
  return Guard("weftReducerFinalize", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::shard::Reducer * r, weft::capi::GetReducer(reducer));
    return r->Finalize(stream);
  });
}

WEFT_API weftResult_t weftReducerSetSync(weftReducer_t reducer, int sync) {
  return Guard("weftReducerSetSync", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::shard::Reducer * r, weft::capi::GetReducer(reducer));
    return r->SetSync(sync != 0);
  });
}

WEFT_API weftResult_t weftReducerDestroy(weftReducer_t reducer) {
  return Guard("weftReducerDestroy", [&]() -> absl::Status {
    RETURN_IF_ERROR(weft::capi::Live<weftReducer>::Check("reducer", reducer));
    weft::capi::Live<weftReducer>::Remove(reducer);
    delete reducer;
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftReducerGetGradSlot(weftReducer_t reducer, int index, void** slot, int* bucket) {
  return Guard("weftReducerGetGradSlot", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::shard::Reducer * r, weft::capi::GetReducer(reducer));
    if (slot == nullptr) return weft::InvalidArgument("slot is NULL");
    ASSIGN_OR_RETURN(void* p, r->GradSlot(index));
    ASSIGN_OR_RETURN(int b, r->GradBucket(index));
    *slot = p;
    if (bucket != nullptr) *bucket = b;
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftReducerGetBucketCount(weftReducer_t reducer, int* count) {
  return Guard("weftReducerGetBucketCount", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::shard::Reducer * r, weft::capi::GetReducer(reducer));
    if (count == nullptr) return weft::InvalidArgument("count is NULL");
    *count = r->num_buckets();
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftReducerGetLayoutVersion(weftReducer_t reducer, int* version) {
  return Guard("weftReducerGetLayoutVersion", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::shard::Reducer * r, weft::capi::GetReducer(reducer));
    if (version == nullptr) return weft::InvalidArgument("version is NULL");
    *version = r->layout_version();
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftReducerGetGradUsed(weftReducer_t reducer, int index, int* used) {
  return Guard("weftReducerGetGradUsed", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::shard::Reducer * r, weft::capi::GetReducer(reducer));
    if (used == nullptr) return weft::InvalidArgument("used is NULL");
    ASSIGN_OR_RETURN(bool u, r->GradUsed(index));
    *used = u ? 1 : 0;
    return absl::OkStatus();
  });
}
