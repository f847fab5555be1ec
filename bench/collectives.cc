#include "bench/collectives.h"

#include <mpi.h>

#include <climits>

#include "bench/types.h"
#include "core/status.h"

namespace weft_bench {

absl::Status MpiStatus(const char* call, int err) {
  if (err == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, text, &len);
  return weft::SystemError("%s: %s", call, std::string(text, len));
}

absl::Status WeftStatus(const char* call, weftResult_t r) {
  if (r == weftSuccess) return absl::OkStatus();
  const std::string detail = weftGetLastError();
  // weft's message already names the call; weftGetErrorString names the result.
  return weft::SystemError("%s (%s)", detail.empty() ? std::string(call) : detail, weftGetErrorString(r));
}

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kAllToAll: return "alltoall";
    case Collective::kSendRecv: return "sendrecv";
  }
  return "invalid";
}

absl::StatusOr<Collective> ParseCollective(const std::string& name) {
  for (Collective c : kCollectives) {
    if (name == CollectiveName(c)) return c;
  }
  return weft::InvalidArgument("collective '%s' is not one of all_reduce, reduce_scatter, all_gather, broadcast, "
                               "reduce, gather, scatter, alltoall, sendrecv", name);
}

bool Reduces(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}
bool HasRoot(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}
bool HasInPlace(Collective c) { return c != Collective::kAllToAll; }

Layout GetLayout(Collective c, size_t elements, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  Layout l;
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      l.count = l.send_count = l.recv_count = elements;
      break;
    case Collective::kReduceScatter:
      l.count = l.recv_count = elements / n;
      l.send_count = l.count * n;
      l.recv_inplace_offset = l.count;  // recv = sendbuf + rank * count
      break;
    case Collective::kAllGather:
    case Collective::kGather:
      l.count = l.send_count = elements / n;
      l.recv_count = l.count * n;
      l.send_inplace_offset = l.count;  // send = recvbuf + rank * count
      break;
    case Collective::kScatter:
      l.count = l.recv_count = elements / n;
      l.send_count = l.count * n;
      l.recv_inplace_offset = l.count;  // recv = sendbuf + rank * count
      break;
    case Collective::kAllToAll:
      l.count = elements / n;
      l.send_count = l.recv_count = l.count * n;
      break;
  }
  return l;
}

void CallBuffers(const Layout& l, bool in_place, int rank, size_t es, unsigned char* send, unsigned char* recv,
                 const void** call_send, void** call_recv) {
  if (!in_place) {
    *call_send = send;
    *call_recv = recv;
    return;
  }
  const size_t r = static_cast<size_t>(rank);
  *call_send = recv + l.send_inplace_offset * r * es;
  *call_recv = recv + l.recv_inplace_offset * r * es;
}

void Bandwidth(Collective c, const Layout& l, size_t es, int nranks, double seconds, double* algbw,
               double* busbw) {
  const double n = nranks;
  double bytes = static_cast<double>(l.count) * static_cast<double>(es);
  double factor = 1;
  switch (c) {
    case Collective::kAllReduce: factor = 2 * (n - 1) / n; break;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kGather:
    case Collective::kScatter:
    case Collective::kAllToAll:
      bytes *= n;
      factor = (n - 1) / n;
      break;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      break;
  }
  *algbw = seconds > 0 ? bytes / 1e9 / seconds : 0;
  *busbw = *algbw * factor;
}

absl::Status RunWeft(Collective c, const void* send, void* recv, size_t count, weftDataType_t t, weftRedOp_t op,
                     int root, weftComm_t comm, void* stream) {
  switch (c) {
    case Collective::kAllReduce:
      return WeftStatus("weftAllReduce", weftAllReduce(send, recv, count, t, op, comm, stream));
    case Collective::kReduceScatter:
      return WeftStatus("weftReduceScatter", weftReduceScatter(send, recv, count, t, op, comm, stream));
    case Collective::kAllGather:
      return WeftStatus("weftAllGather", weftAllGather(send, recv, count, t, comm, stream));
    case Collective::kBroadcast:
      return WeftStatus("weftBroadcast", weftBroadcast(send, recv, count, t, root, comm, stream));
    case Collective::kReduce:
      return WeftStatus("weftReduce", weftReduce(send, recv, count, t, op, root, comm, stream));
    case Collective::kGather:
      return WeftStatus("weftGather", weftGather(send, recv, count, t, root, comm, stream));
    case Collective::kScatter:
      return WeftStatus("weftScatter", weftScatter(send, recv, count, t, root, comm, stream));
    case Collective::kAllToAll:
      return WeftStatus("weftAllToAll", weftAllToAll(send, recv, count, t, comm, stream));
    case Collective::kSendRecv: {
      int rank = 0, n = 1;
      RETURN_IF_ERROR(WeftStatus("weftCommUserRank", weftCommUserRank(comm, &rank)));
      RETURN_IF_ERROR(WeftStatus("weftCommCount", weftCommCount(comm, &n)));
      RETURN_IF_ERROR(WeftStatus("weftGroupStart", weftGroupStart()));
      const weftResult_t sent = weftSend(send, count, t, (rank + 1) % n, comm, stream);
      const weftResult_t got = sent == weftSuccess ? weftRecv(recv, count, t, (rank - 1 + n) % n, comm, stream) : sent;
      const weftResult_t end = weftGroupEnd();
      RETURN_IF_ERROR(WeftStatus("weftSend", sent));
      RETURN_IF_ERROR(WeftStatus("weftRecv", got));
      return WeftStatus("weftGroupEnd", end);
    }
  }
  return weft::InternalError("collective %d", static_cast<int>(c));
}

bool MpiCanRun(Collective c, weftDataType_t t) {
  MPI_Datatype dt;
  return MpiType(t, Reduces(c), &dt);
}

absl::Status RunMpi(Collective c, const void* send, void* recv, size_t count, weftDataType_t t, weftRedOp_t op,
                    int root) {
  MPI_Datatype dt;
  if (!MpiType(t, Reduces(c), &dt)) {
    return weft::Unsupported("MPI has no %s reduction for the %s baseline", TypeName(t), CollectiveName(c));
  }
  if (count > static_cast<size_t>(INT_MAX)) {
    return weft::Unsupported("count = %zu exceeds MPI's int counts", count);
  }
  const int n = static_cast<int>(count);
  switch (c) {
    case Collective::kAllReduce:
      return MpiStatus("MPI_Allreduce", MPI_Allreduce(send, recv, n, dt, MpiOp(op), MPI_COMM_WORLD));
    case Collective::kReduceScatter:
      return MpiStatus("MPI_Reduce_scatter_block",
                       MPI_Reduce_scatter_block(send, recv, n, dt, MpiOp(op), MPI_COMM_WORLD));
    case Collective::kAllGather:
      return MpiStatus("MPI_Allgather", MPI_Allgather(send, n, dt, recv, n, dt, MPI_COMM_WORLD));
    case Collective::kBroadcast:
      return MpiStatus("MPI_Bcast", MPI_Bcast(recv, n, dt, root, MPI_COMM_WORLD));
    case Collective::kReduce:
      return MpiStatus("MPI_Reduce", MPI_Reduce(send, recv, n, dt, MpiOp(op), root, MPI_COMM_WORLD));
    case Collective::kGather:
      return MpiStatus("MPI_Gather", MPI_Gather(send, n, dt, recv, n, dt, root, MPI_COMM_WORLD));
    case Collective::kScatter:
      return MpiStatus("MPI_Scatter", MPI_Scatter(send, n, dt, recv, n, dt, root, MPI_COMM_WORLD));
    case Collective::kAllToAll:
      return MpiStatus("MPI_Alltoall", MPI_Alltoall(send, n, dt, recv, n, dt, MPI_COMM_WORLD));
    case Collective::kSendRecv: {
      int rank = 0, size = 1;
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      return MpiStatus("MPI_Sendrecv", MPI_Sendrecv(send, n, dt, (rank + 1) % size, 0, recv, n, dt,
                                                    (rank - 1 + size) % size, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
  }
  return weft::InternalError("collective %d", static_cast<int>(c));
}

}  // namespace weft_bench
