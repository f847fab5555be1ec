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
  }
  return "invalid";
}

absl::StatusOr<Collective> ParseCollective(const std::string& name) {
  for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                       Collective::kBroadcast}) {
    if (name == CollectiveName(c)) return c;
  }
  return weft::InvalidArgument("collective '%s' is not one of all_reduce, reduce_scatter, all_gather, broadcast",
                               name);
}

bool Reduces(Collective c) { return c == Collective::kAllReduce || c == Collective::kReduceScatter; }
bool HasRoot(Collective c) { return c == Collective::kBroadcast; }

Layout GetLayout(Collective c, size_t elements, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  Layout l;
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
      l.count = l.send_count = l.recv_count = elements;
      break;
    case Collective::kReduceScatter:
      l.count = l.recv_count = elements / n;
      l.send_count = l.count * n;
      l.recv_inplace_offset = l.count;  // recv = sendbuf + rank * count
      break;
    case Collective::kAllGather:
      l.count = l.send_count = elements / n;
      l.recv_count = l.count * n;
      l.send_inplace_offset = l.count;  // send = recvbuf + rank * count
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
      bytes *= n;
      factor = (n - 1) / n;
      break;
    case Collective::kBroadcast: break;
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
  }
  return weft::InternalError("collective %d", static_cast<int>(c));
}

}  // namespace weft_bench
