// Collective entry points: check the handle, then the Communicator checks
// the rest (comm/communicator.cc), so C++ callers get the same checks.
#include "capi/export.h"
#include "capi/handles.h"
#include "capi/result.h"

using weft::capi::DataTypeOf;
using weft::capi::Guard;

namespace {

// Read as ints: Communicator checks the values.
weft::RedOp Op(const weftRedOp_t& op) { return static_cast<weft::RedOp>(weft::capi::EnumValue(op)); }

}  // namespace

WEFT_API weftResult_t weftAllReduce(const void* sendbuf, void* recvbuf, size_t count, weftDataType_t dtype,
                                    weftRedOp_t op, weftComm_t comm, void* stream) {
  return Guard("weftAllReduce", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->AllReduce(sendbuf, recvbuf, count, DataTypeOf(dtype), Op(op), stream);
  });
}

WEFT_API weftResult_t weftReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                        weftDataType_t dtype, weftRedOp_t op, weftComm_t comm, void* stream) {
  return Guard("weftReduceScatter", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->ReduceScatter(sendbuf, recvbuf, recvcount, DataTypeOf(dtype), Op(op), stream);
  });
}

WEFT_API weftResult_t weftAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, weftDataType_t dtype,
                                    weftComm_t comm, void* stream) {
  return Guard("weftAllGather", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->AllGather(sendbuf, recvbuf, sendcount, DataTypeOf(dtype), stream);
  });
}

WEFT_API weftResult_t weftBroadcast(const void* sendbuf, void* recvbuf, size_t count, weftDataType_t dtype,
                                    int root, weftComm_t comm, void* stream) {
  return Guard("weftBroadcast", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->Broadcast(sendbuf, recvbuf, count, DataTypeOf(dtype), root, stream);
  });
}

static_assert(WEFT_TAG_MAX == weft::kMaxTag, "weft/collectives.h and comm/communicator.h agree on the tag range");

WEFT_API weftResult_t weftSend(const void* sendbuf, size_t count, weftDataType_t dtype, int peer, weftComm_t comm,
                               void* stream) {
  return Guard("weftSend", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->Send(sendbuf, count, DataTypeOf(dtype), peer, stream);
  });
}

WEFT_API weftResult_t weftRecv(void* recvbuf, size_t count, weftDataType_t dtype, int peer, weftComm_t comm,
                               void* stream) {
  return Guard("weftRecv", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->Recv(recvbuf, count, DataTypeOf(dtype), peer, stream);
  });
}

WEFT_API weftResult_t weftSendTagged(const void* sendbuf, size_t count, weftDataType_t dtype, int peer, int tag,
                                     weftComm_t comm, void* stream) {
  return Guard("weftSendTagged", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->SendTagged(sendbuf, count, DataTypeOf(dtype), peer, tag, stream);
  });
}

WEFT_API weftResult_t weftRecvTagged(void* recvbuf, size_t count, weftDataType_t dtype, int peer, int tag,
                                     weftComm_t comm, void* stream) {
  return Guard("weftRecvTagged", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->RecvTagged(recvbuf, count, DataTypeOf(dtype), peer, tag, stream);
  });
}

WEFT_API weftResult_t weftRecvAnySource(void* recvbuf, size_t count, weftDataType_t dtype, int tag, int* source,
                                        weftComm_t comm, void* stream) {
  return Guard("weftRecvAnySource", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->RecvAnySource(recvbuf, count, DataTypeOf(dtype), tag, source, stream);
  });
}

WEFT_API weftResult_t weftReduce(const void* sendbuf, void* recvbuf, size_t count, weftDataType_t dtype,
                                 weftRedOp_t op, int root, weftComm_t comm, void* stream) {
  return Guard("weftReduce", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->Reduce(sendbuf, recvbuf, count, DataTypeOf(dtype), Op(op), root, stream);
  });
}

WEFT_API weftResult_t weftGather(const void* sendbuf, void* recvbuf, size_t sendcount, weftDataType_t dtype, int root,
                                 weftComm_t comm, void* stream) {
  return Guard("weftGather", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->Gather(sendbuf, recvbuf, sendcount, DataTypeOf(dtype), root, stream);
  });
}

WEFT_API weftResult_t weftScatter(const void* sendbuf, void* recvbuf, size_t recvcount, weftDataType_t dtype,
                                  int root, weftComm_t comm, void* stream) {
  return Guard("weftScatter", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->Scatter(sendbuf, recvbuf, recvcount, DataTypeOf(dtype), root, stream);
  });
}

WEFT_API weftResult_t weftAllToAll(const void* sendbuf, void* recvbuf, size_t count, weftDataType_t dtype,
                                   weftComm_t comm, void* stream) {
  return Guard("weftAllToAll", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->AllToAll(sendbuf, recvbuf, count, DataTypeOf(dtype), stream);
  });
}

WEFT_API weftResult_t weftAllToAllv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                                    void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                                    weftDataType_t dtype, weftComm_t comm, void* stream) {
  return Guard("weftAllToAllv", [&]() -> absl::Status {
    ASSIGN_OR_RETURN(weft::Communicator * c, weft::capi::GetComm("comm", comm));
    return c->AllToAllv(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, DataTypeOf(dtype), stream);
  });
}

WEFT_API weftResult_t weftGroupStart(void) {
  return Guard("weftGroupStart", []() -> absl::Status { return weft::Communicator::GroupStart(); });
}

WEFT_API weftResult_t weftGroupEnd(void) {
  return Guard("weftGroupEnd", []() -> absl::Status { return weft::Communicator::GroupEnd(); });
}
