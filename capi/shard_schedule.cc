// Shard schedule entry points (include/weft/weft.h, "shard schedule").
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "capi/export.h"
#include "capi/handles.h"
#include "capi/result.h"
#include "capi/shard_handle.h"
#include "core/stream.h"
#include "shard/schedule.h"

struct weftShardSchedule {
  std::unique_ptr<weft::HostStream> own_stream;  // when the caller passed none
  weftStream_t stream = nullptr;                 // host: the caller's weftStream_t, else NULL
  weftShardScheduleConfig_t config;
  // The handle of each group the schedule has seen, for the acquire and release callbacks.
  absl::flat_hash_map<weft::shard::ShardGroup*, weftShardGroup_t> handles;
  std::unique_ptr<weft::shard::ShardSchedule> impl;  // last: destroyed first, while the stream lives
};

namespace weft {
namespace capi {
namespace {

using shard::ShardGroup;
using shard::ShardSchedule;

absl::StatusOr<weftShardSchedule*> GetSchedule(weftShardSchedule_t s) {
  RETURN_IF_ERROR(Live<weftShardSchedule>::Check("schedule", s));
  return s;
}

absl::StatusOr<weftShardScheduleConfig_t> ReadScheduleConfig(const weftShardScheduleConfig_t* config) {
  weftShardScheduleConfig_t c = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
  if (config != nullptr) RETURN_IF_ERROR(ReadSized("config", config, &c));
  if (c.reshard_after_forward != 0 && c.reshard_after_forward != 1) {
    return InvalidArgument("config->reshard_after_forward = %d (expected 0 or 1)", c.reshard_after_forward);
  }
  if (c.prefetch != 0 && c.prefetch != 1) {
    return InvalidArgument("config->prefetch = %d (expected 0 or 1)", c.prefetch);
  }
  const int memory = EnumValue(c.memory);
  if (memory != weftMemoryHost && memory != weftMemoryCuda) {
    return InvalidArgument("config->memory = %d is not a weftMemoryKind_t", memory);
  }
  if ((c.acquire == nullptr) != (c.release == nullptr)) {
    return InvalidArgument("config->acquire is %s but config->release is %s (set both or neither)",
                           c.acquire ? "set" : "NULL", c.release ? "set" : "NULL");
  }
  return c;
}

// The schedule's options; the callbacks reach the caller's functions through `s`.
shard::ScheduleOptions Options(weftShardSchedule* s) {
  shard::ScheduleOptions o;
  o.reshard_after_forward = s->config.reshard_after_forward != 0;
  o.prefetch = s->config.prefetch != 0;
  if (s->config.acquire == nullptr) return o;
  o.buffers.acquire = [s](ShardGroup* g, size_t bytes) -> absl::StatusOr<void*> {
    return s->config.acquire(s->config.user, s->handles.at(g), bytes);
  };
  o.buffers.release = [s](ShardGroup* g, void* full) { s->config.release(s->config.user, s->handles.at(g), full); };
  return o;
}

// Checks the schedule and the group, and remembers the group's handle.
absl::StatusOr<ShardGroup*> Enter(weftShardSchedule* s, weftShardGroup_t group) {
  ASSIGN_OR_RETURN(ShardGroup * g, GetGroup("group", group));
  s->handles[g] = group;
  return g;
}

}  // namespace
}  // namespace capi
}  // namespace weft

using weft::capi::Guard;

namespace {

// Both creates, once the config is read: `stream` is a weftStream_t (or
// NULL) for host memory, a cudaStream_t for CUDA memory.
absl::Status CreateSchedule(void* stream, const weftShardScheduleConfig_t& cfg, weftShardSchedule_t* schedule) {
  std::unique_ptr<weft::shard::ScheduleStreams> streams;
  auto s = std::make_unique<weftShardSchedule>();
  if (cfg.memory == weftMemoryCuda) {
    // What the framework computes on (NULL: the legacy default stream).
    ASSIGN_OR_RETURN(streams, weft::shard::DeviceScheduleStreams(stream));
  } else {
    weft::HostStream* hs = nullptr;
    if (stream != nullptr) {
      hs = weft::HostStream::Find(stream);
      if (hs == nullptr) {
        return weft::InvalidArgument("stream = %p is not a live weft host stream (config->memory = weftMemoryHost; "
                                     "for groups on CUDA memory use weftShardScheduleCreateCuda with a "
                                     "cudaStream_t)", stream);
      }
      s->stream = static_cast<weftStream_t>(stream);
    } else {
      s->own_stream = std::make_unique<weft::HostStream>();
      hs = s->own_stream.get();
    }
    streams = weft::shard::HostScheduleStreams(hs);
  }
  s->config = cfg;
  s->impl = std::make_unique<weft::shard::ShardSchedule>(std::move(streams), weft::capi::Options(s.get()));
  *schedule = s.release();
  weft::capi::Live<weftShardSchedule>::Add(*schedule);
  return absl::OkStatus();
}

}  // namespace

WEFT_API weftResult_t weftShardScheduleCreate(weftStream_t stream, const weftShardScheduleConfig_t* config,
                                              weftShardSchedule_t* schedule) {
  return Guard("weftShardScheduleCreate", [&]() -> absl::Status {
    if (schedule == nullptr) return weft::InvalidArgument("schedule is NULL");
    ASSIGN_OR_RETURN(const auto cfg, weft::capi::ReadScheduleConfig(config));
    return CreateSchedule(static_cast<void*>(stream), cfg, schedule);
  });
}

WEFT_API weftResult_t weftShardScheduleCreateCuda(void* cuda_stream, const weftShardScheduleConfig_t* config,
                                                  weftShardSchedule_t* schedule) {
  return Guard("weftShardScheduleCreateCuda", [&]() -> absl::Status {
    if (schedule == nullptr) return weft::InvalidArgument("schedule is NULL");
    weftShardScheduleConfig_t defaults = WEFT_SHARD_SCHEDULE_CONFIG_INITIALIZER;
    defaults.memory = weftMemoryCuda;
    ASSIGN_OR_RETURN(const auto cfg, weft::capi::ReadScheduleConfig(config != nullptr ? config : &defaults));
    if (cfg.memory != weftMemoryCuda) {
      return weft::InvalidArgument("config->memory = %d: weftShardScheduleCreateCuda makes schedules for CUDA "
                                   "memory (weftMemoryCuda = %d); for host memory use weftShardScheduleCreate",
                                   weft::capi::EnumValue(cfg.memory), static_cast<int>(weftMemoryCuda));
    }
    return CreateSchedule(cuda_stream, cfg, schedule);
  });
}

WEFT_API weftResult_t weftShardScheduleDestroy(weftShardSchedule_t schedule) {
  return Guard("weftShardScheduleDestroy", [&]() -> absl::Status {
    RETURN_IF_ERROR(weft::capi::Live<weftShardSchedule>::Check("schedule", schedule));
    weft::capi::Live<weftShardSchedule>::Remove(schedule);
    // Garbage-collected bindings cannot always destroy the schedule before its stream.
    if (schedule->config.memory == weftMemoryHost && schedule->stream != nullptr &&
        weft::HostStream::Find(schedule->stream) == nullptr) {
      schedule->impl->StreamDestroyed();
    }
    delete schedule;
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardScheduleDeclareOrder(weftShardSchedule_t schedule, const weftShardGroup_t* groups,
                                                    int n) {
  return Guard("weftShardScheduleDeclareOrder", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* s, weft::capi::GetSchedule(schedule));
    if (n < 0) return weft::InvalidArgument("n = %d is negative", n);
    if (n > 0 && groups == nullptr) return weft::InvalidArgument("groups is NULL with n = %d", n);
    if (s->impl->in_step()) {
      return weft::InvalidUsage("the order is declared between steps (call weftShardScheduleEndStep first)");
    }
    std::vector<weft::shard::ShardGroup*> order(n);
    for (int i = 0; i < n; ++i) {
      ASSIGN_OR_RETURN(order[i], weft::capi::GetGroup(absl::StrFormat("groups[%d]", i).c_str(), groups[i]));
    }
    RETURN_IF_ERROR(s->impl->SetOrder(std::move(order)));
    for (int i = 0; i < n; ++i) s->handles[groups[i]->impl.get()] = groups[i];
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardScheduleSetReshardAfterForward(weftShardSchedule_t schedule, weftShardGroup_t group,
                                                              int reshard) {
  return Guard("weftShardScheduleSetReshardAfterForward", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* s, weft::capi::GetSchedule(schedule));
    ASSIGN_OR_RETURN(auto* g, weft::capi::GetGroup("group", group));
    if (reshard != 0 && reshard != 1) return weft::InvalidArgument("reshard = %d (expected 0 or 1)", reshard);
    RETURN_IF_ERROR(s->impl->SetReshardAfterForward(g, reshard != 0));
    s->handles[g] = group;
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftShardScheduleBeginStep(weftShardSchedule_t schedule) {
  return Guard("weftShardScheduleBeginStep", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* s, weft::capi::GetSchedule(schedule));
    return s->impl->BeginStep();
  });
}

WEFT_API weftResult_t weftShardSchedulePreForward(weftShardSchedule_t schedule, weftShardGroup_t group) {
  return Guard("weftShardSchedulePreForward", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* s, weft::capi::GetSchedule(schedule));
    ASSIGN_OR_RETURN(auto* g, weft::capi::Enter(s, group));
    return s->impl->PreForward(g);
  });
}

WEFT_API weftResult_t weftShardSchedulePostForward(weftShardSchedule_t schedule, weftShardGroup_t group) {
  return Guard("weftShardSchedulePostForward", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* s, weft::capi::GetSchedule(schedule));
    ASSIGN_OR_RETURN(auto* g, weft::capi::Enter(s, group));
    return s->impl->PostForward(g);
  });
}

WEFT_API weftResult_t weftShardSchedulePreBackward(weftShardSchedule_t schedule, weftShardGroup_t group) {
  return Guard("weftShardSchedulePreBackward", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* s, weft::capi::GetSchedule(schedule));
    ASSIGN_OR_RETURN(auto* g, weft::capi::Enter(s, group));
    return s->impl->PreBackward(g);
  });
}

WEFT_API weftResult_t weftShardSchedulePostBackward(weftShardSchedule_t schedule, weftShardGroup_t group,
                                                    const weftTensor_t* grads, int n) {
  return Guard("weftShardSchedulePostBackward", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* s, weft::capi::GetSchedule(schedule));
    ASSIGN_OR_RETURN(auto* g, weft::capi::Enter(s, group));
    ASSIGN_OR_RETURN(const auto refs, weft::capi::ReadGrads(*g, grads, n));
    return s->impl->PostBackward(g, refs);
  });
}

WEFT_API weftResult_t weftShardScheduleEndStep(weftShardSchedule_t schedule) {
  return Guard("weftShardScheduleEndStep", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* s, weft::capi::GetSchedule(schedule));
    return s->impl->EndStep();
  });
}

WEFT_API weftResult_t weftShardScheduleGetState(weftShardSchedule_t schedule, int* order_length, int* gathered,
                                                int* max_gathered) {
  return Guard("weftShardScheduleGetState", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto* s, weft::capi::GetSchedule(schedule));
    if (order_length != nullptr) *order_length = static_cast<int>(s->impl->order().size());
    if (gathered != nullptr) *gathered = s->impl->gathered();
    if (max_gathered != nullptr) *max_gathered = s->impl->max_gathered();
    return absl::OkStatus();
  });
}
