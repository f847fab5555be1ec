// Communicator and host stream entry points.
#include <memory>
#include <string>
#include <vector>

#include "capi/export.h"
#include "capi/handles.h"
#include "capi/result.h"
#include "comm/bootstrap/wire.h"
#include "comm/registry.h"
#include "core/status.h"
#include "core/stream.h"

namespace weft {
namespace capi {

weftComm_t NewHandle(std::unique_ptr<Communicator> impl) {
  auto* h = new weftComm();
  h->impl = std::move(impl);
  Live<weftComm>::Add(h);
  return h;
}

namespace {

absl::StatusOr<weftConfig_t> ReadConfig(const weftConfig_t* config) {
  weftConfig_t c = WEFT_CONFIG_INITIALIZER;
  if (config != nullptr) RETURN_IF_ERROR(ReadSized("config", config, &c));
  const int backend = EnumValue(c.backend), memory = EnumValue(c.memory), wait = EnumValue(c.wait);
  if (backend < 0 || backend >= weftNumBackends) {
    return InvalidArgument("config->backend = %d is not a weftBackend_t (expected 0..%d)", backend,
                           weftNumBackends - 1);
  }
  if (memory < 0 || memory >= weftNumMemoryKinds) {
    return InvalidArgument("config->memory = %d is not a weftMemoryKind_t (expected 0..%d)", memory,
                           weftNumMemoryKinds - 1);
  }
  if (wait < 0 || wait >= weftNumWaitPolicies) {
    return InvalidArgument("config->wait = %d is not a weftWaitPolicy_t (expected 0..%d)", wait,
                           weftNumWaitPolicies - 1);
  }
  if (c.timeout_ms < 0) return InvalidArgument("config->timeout_ms = %d is negative", c.timeout_ms);
  if (c.trust_memory != 0 && c.trust_memory != 1) {
    return InvalidArgument("config->trust_memory = %d (expected 0 or 1)", c.trust_memory);
  }
  if (c.bootstrap_timeout_ms < 0) {
    return InvalidArgument("config->bootstrap_timeout_ms = %d is negative", c.bootstrap_timeout_ms);
  }
  if (c.cuda_device < -1) return InvalidArgument("config->cuda_device = %d (expected -1 or a device ordinal)", c.cuda_device);
  return c;
}

CommOptions ToOptions(const weftConfig_t& c) {
  CommOptions o;
  o.memory = static_cast<MemKind>(c.memory);
  o.timeout_ms = c.timeout_ms;
  o.segment_bytes = c.segment_bytes;
  o.cuda_device = c.cuda_device;
  o.bootstrap_timeout_ms = c.bootstrap_timeout_ms;
  o.wait = static_cast<WaitPolicy>(c.wait);
  o.trust_memory = c.trust_memory != 0;
  return o;
}

static_assert(sizeof(weftUniqueId) == bootstrap::kUniqueIdBytes, "weftUniqueId and the bootstrap's id differ");

// The caller's store as the registry's: its callbacks' non-zero returns
// become errors naming the key.
KeyValueStore Adapt(const weftStore_t& st) {
  KeyValueStore kv;
  kv.set = [st](const std::string& key, const std::string& value) -> absl::Status {
    if (st.set(st.ctx, key.c_str(), value.data(), value.size()) != 0) {
      return SystemError("store->set(\"%s\", %d bytes) failed", key, value.size());
    }
    return absl::OkStatus();
  };
  kv.get = [st](const std::string& key, int timeout_ms) -> absl::StatusOr<std::string> {
    std::string value(bootstrap::kUniqueIdBytes, '\0');
    size_t len = 0;
    if (st.get(st.ctx, key.c_str(), value.data(), value.size(), &len, timeout_ms) != 0) {
      return Timeout("store->get(\"%s\") failed or timed out after %d ms", key, timeout_ms);
    }
    if (len > value.size()) {
      return InvalidUsage("store->get(\"%s\") reported %d bytes into a buffer of %d", key, len, value.size());
    }
    value.resize(len);
    return value;
  };
  return kv;
}

absl::StatusOr<HostStream*> GetStream(weftStream_t stream) {
  if (stream == nullptr) return InvalidArgument("stream is NULL");
  HostStream* s = HostStream::Find(stream);
  if (s == nullptr) return InvalidArgument("stream = %p is not a live weft host stream", static_cast<void*>(stream));
  return s;
}

}  // namespace
}  // namespace capi
}  // namespace weft

using weft::capi::Guard;

WEFT_API weftResult_t weftCommInitWorld(weftComm_t* comm, const weftConfig_t* config) {
  return Guard("weftCommInitWorld", [&]() -> absl::Status {
    if (comm == nullptr) return weft::InvalidArgument("comm is NULL");
    *comm = nullptr;
    ASSIGN_OR_RETURN(const weftConfig_t c, weft::capi::ReadConfig(config));
    ASSIGN_OR_RETURN(auto impl, weft::InitWorld(static_cast<weft::Backend>(c.backend), weft::capi::ToOptions(c)));
    *comm = weft::capi::NewHandle(std::move(impl));
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftGetUniqueId(weftUniqueId* id) {
  return Guard("weftGetUniqueId", [&]() -> absl::Status {
    if (id == nullptr) return weft::InvalidArgument("id is NULL");
    ASSIGN_OR_RETURN(const weft::bootstrap::UniqueId made, weft::MakeUniqueId());
    weft::bootstrap::EncodeUniqueId(made, reinterpret_cast<unsigned char*>(id->internal));
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommInitRank(weftComm_t* comm, int nranks, weftUniqueId id, int rank,
                                       const weftConfig_t* config) {
  return Guard("weftCommInitRank", [&]() -> absl::Status {
    if (comm == nullptr) return weft::InvalidArgument("comm is NULL");
    *comm = nullptr;
    if (nranks < 1) return weft::InvalidArgument("nranks = %d must be at least 1", nranks);
    if (rank < 0 || rank >= nranks) return weft::InvalidArgument("rank = %d is outside [0, nranks = %d)", rank, nranks);
    ASSIGN_OR_RETURN(const weftConfig_t c, weft::capi::ReadConfig(config));
    ASSIGN_OR_RETURN(const weft::bootstrap::UniqueId decoded,
                     weft::bootstrap::DecodeUniqueId(reinterpret_cast<const unsigned char*>(id.internal)));
    ASSIGN_OR_RETURN(auto impl, weft::InitRank(static_cast<weft::Backend>(c.backend), nranks, decoded, rank,
                                               weft::capi::ToOptions(c)));
    *comm = weft::capi::NewHandle(std::move(impl));
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommInitStore(weftComm_t* comm, int nranks, int rank, const weftStore_t* store,
                                        const char* prefix, const weftConfig_t* config) {
  return Guard("weftCommInitStore", [&]() -> absl::Status {
    if (comm == nullptr) return weft::InvalidArgument("comm is NULL");
    *comm = nullptr;
    if (nranks < 1) return weft::InvalidArgument("nranks = %d must be at least 1", nranks);
    if (rank < 0 || rank >= nranks) return weft::InvalidArgument("rank = %d is outside [0, nranks = %d)", rank, nranks);
    if (store == nullptr) return weft::InvalidArgument("store is NULL");
    weftStore_t st = WEFT_STORE_INITIALIZER;
    RETURN_IF_ERROR(weft::capi::ReadSized("store", store, &st));
    if (st.set == nullptr) return weft::InvalidArgument("store->set is NULL");
    if (st.get == nullptr) return weft::InvalidArgument("store->get is NULL");
    ASSIGN_OR_RETURN(const weftConfig_t c, weft::capi::ReadConfig(config));
    ASSIGN_OR_RETURN(auto impl, weft::InitStore(static_cast<weft::Backend>(c.backend), nranks, rank,
                                                weft::capi::Adapt(st), prefix != nullptr ? prefix : "",
                                                weft::capi::ToOptions(c)));
    *comm = weft::capi::NewHandle(std::move(impl));
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommInitInProcess(weftComm_t* comms, int nranks, const weftConfig_t* config) {
  return Guard("weftCommInitInProcess", [&]() -> absl::Status {
    if (comms == nullptr) return weft::InvalidArgument("comms is NULL");
    if (nranks < 1) return weft::InvalidArgument("nranks = %d must be at least 1", nranks);
    ASSIGN_OR_RETURN(const weftConfig_t c, weft::capi::ReadConfig(config));
    if (c.backend != weftBackendAuto && c.backend != weftBackendInProcess) {
      return weft::InvalidArgument("config->backend = %d: weftCommInitInProcess makes in-process communicators "
                                   "(use weftBackendAuto or weftBackendInProcess)", c.backend);
    }
    const weft::BackendFactory* inproc = weft::FindBackend(weft::Backend::kInProcess);
    if (inproc == nullptr || inproc->init_local == nullptr) {
      return weft::InternalError("weftCommInitInProcess: the in-process backend is not registered");
    }
    ASSIGN_OR_RETURN(auto impls, inproc->init_local(nranks, weft::capi::ToOptions(c)));
    for (int r = 0; r < nranks; ++r) comms[r] = weft::capi::NewHandle(std::move(impls[r]));
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommSplit(weftComm_t comm, int color, int key, weftComm_t* newcomm) {
  return Guard("weftCommSplit", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    if (newcomm == nullptr) return weft::InvalidArgument("newcomm is NULL");
    ASSIGN_OR_RETURN(auto impl, c->Split(color, key));
    *newcomm = impl ? weft::capi::NewHandle(std::move(impl)) : nullptr;
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommCount(weftComm_t comm, int* count) {
  return Guard("weftCommCount", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    if (count == nullptr) return weft::InvalidArgument("count is NULL");
    *count = c->size();
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommUserRank(weftComm_t comm, int* rank) {
  return Guard("weftCommUserRank", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    if (rank == nullptr) return weft::InvalidArgument("rank is NULL");
    *rank = c->rank();
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommGetBackend(weftComm_t comm, weftBackend_t* backend) {
  return Guard("weftCommGetBackend", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    if (backend == nullptr) return weft::InvalidArgument("backend is NULL");
    *backend = static_cast<weftBackend_t>(c->backend());
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommGetMemoryKind(weftComm_t comm, weftMemoryKind_t* memory) {
  return Guard("weftCommGetMemoryKind", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    if (memory == nullptr) return weft::InvalidArgument("memory is NULL");
    *memory = static_cast<weftMemoryKind_t>(c->memory());
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommGetCudaDevice(weftComm_t comm, int* device) {
  return Guard("weftCommGetCudaDevice", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    if (device == nullptr) return weft::InvalidArgument("device is NULL");
    *device = c->memory() == weft::MemKind::kCuda ? c->options().cuda_device : -1;
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t* asyncError) {
  return Guard("weftCommGetAsyncError", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    if (asyncError == nullptr) return weft::InvalidArgument("asyncError is NULL");
    *asyncError = weft::capi::ToResult(c->async_error());
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommAbort(weftComm_t comm) {
  return Guard("weftCommAbort", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    c->Abort();
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftCommDestroy(weftComm_t comm) {
  return Guard("weftCommDestroy", [&]() -> absl::Status {
    RETURN_IF_ERROR(weft::capi::Live<weftComm>::Check("comm", comm));
    weft::capi::Live<weftComm>::Remove(comm);
    comm->impl->Quiesce();
    delete comm;
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftBarrier(weftComm_t comm) {
  return Guard("weftBarrier", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->Barrier();
  });
}

WEFT_API weftResult_t weftStreamCreate(weftStream_t* stream) {
  return Guard("weftStreamCreate", [&]() -> absl::Status {
    if (stream == nullptr) return weft::InvalidArgument("stream is NULL");
    *stream = reinterpret_cast<weftStream_t>(new weft::HostStream());
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftStreamCreateWithFlags(weftStream_t* stream, unsigned int flags) {
  return Guard("weftStreamCreateWithFlags", [&]() -> absl::Status {
    if (stream == nullptr) return weft::InvalidArgument("stream is NULL");
    constexpr unsigned int kAll = weftStreamWaitersRun | weftStreamIssuerCpu;
    if ((flags & ~kAll) != 0) {
      return weft::InvalidArgument(
          "flags = 0x%x has bits that are not weftStreamFlags_t (weftStreamWaitersRun = 0x1, "
          "weftStreamIssuerCpu = 0x2)", flags);
    }
    *stream = reinterpret_cast<weftStream_t>(
        new weft::HostStream((flags & weftStreamWaitersRun) != 0, (flags & weftStreamIssuerCpu) != 0));
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftStreamSynchronize(weftStream_t stream) {
  return Guard("weftStreamSynchronize", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::HostStream * s, weft::capi::GetStream(stream));
    return s->Synchronize();
  });
}

WEFT_API weftResult_t weftStreamQuery(weftStream_t stream) {
  weftResult_t pending = weftSuccess;
  const weftResult_t r = Guard("weftStreamQuery", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::HostStream * s, weft::capi::GetStream(stream));
    RETURN_IF_ERROR(s->PendingError());
    if (!s->Idle()) pending = weftInProgress;
    return absl::OkStatus();
  });
  return r == weftSuccess ? pending : r;
}

WEFT_API weftResult_t weftStreamAddCallback(weftStream_t stream, weftStreamCallback_t fn, void* arg) {
  return Guard("weftStreamAddCallback", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::HostStream * s, weft::capi::GetStream(stream));
    if (fn == nullptr) return weft::InvalidArgument("fn is NULL");
    s->EnqueueCallback([stream, fn, arg](absl::Status st) {
      // The error becomes the stream thread's last error, as a failed
      // weftStreamSynchronize would make it the caller's.
      const weftResult_t r = st.ok() ? weftSuccess : weft::capi::Fail("weftStreamAddCallback", st);
      fn(stream, r, arg);
    });
    return absl::OkStatus();
  });
}

WEFT_API weftResult_t weftStreamDestroy(weftStream_t stream) {
  return Guard("weftStreamDestroy", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::HostStream * s, weft::capi::GetStream(stream));
    absl::Status st = s->Synchronize();
    delete s;
    return st;
  });
}
