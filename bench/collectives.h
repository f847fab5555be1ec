// What weft-bench needs to know about each collective: how a table size
// becomes counts and buffers, how time becomes bandwidth, how to call weft
// (through the C ABI) and the raw-MPI baseline.
//
// Size semantics and bandwidths are nccl-tests' (see its doc/PERFORMANCE.md):
// the table's size is the largest buffer (for all_gather and reduce_scatter,
// the whole nranks-block buffer); algbw = bytes / time with those bytes, and
// busbw = algbw * factor, the factor turning it into what each rank's link
// carries in an optimal algorithm:
//
//   all_reduce      count = size/es        bytes = count*es        2(n-1)/n
//   reduce_scatter  count = size/es/n      bytes = count*es*n      (n-1)/n
//   all_gather      count = size/es/n      bytes = count*es*n      (n-1)/n
//   broadcast       count = size/es        bytes = count*es        1
//   reduce          count = size/es        bytes = count*es        1
//   gather          count = size/es/n      bytes = count*es*n      (n-1)/n
//   scatter         count = size/es/n      bytes = count*es*n      (n-1)/n
//   alltoall        count = size/es/n      bytes = count*es*n      (n-1)/n
//   sendrecv        count = size/es        bytes = count*es        1
//
// sendrecv is a ring exchange: every rank sends to rank+1 and receives from
// rank-1 in one group (weftGroupStart/End). alltoall is never in place, so
// its in-place columns are N/A.
//
//   Layout l = GetLayout(Collective::kAllGather, 1000, 4);  // l.count == 250
#ifndef WEFT_BENCH_COLLECTIVES_H_
#define WEFT_BENCH_COLLECTIVES_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weft/weft.h"

namespace weft_bench {

enum class Collective : int {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kReduce = 4,
  kGather = 5,
  kScatter = 6,
  kAllToAll = 7,
  kSendRecv = 8
};
inline constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kReduceScatter,
                                              Collective::kAllGather, Collective::kBroadcast, Collective::kReduce,
                                              Collective::kGather, Collective::kScatter, Collective::kAllToAll,
                                              Collective::kSendRecv};

const char* CollectiveName(Collective c);
absl::StatusOr<Collective> ParseCollective(const std::string& name);
bool Reduces(Collective c);    // takes an op
bool HasRoot(Collective c);
bool HasInPlace(Collective c);  // false: alltoall

// One measurement's element counts, nccl-tests' getCollByteCount. Offsets
// place the in-place call: send = recvbuf + send_inplace_offset * rank,
// recv = recvbuf + recv_inplace_offset * rank (elements).
struct Layout {
  size_t count = 0;        // the count argument of the call
  size_t send_count = 0;   // elements in sendbuf
  size_t recv_count = 0;   // elements in recvbuf
  size_t send_inplace_offset = 0;
  size_t recv_inplace_offset = 0;
  size_t bytes(size_t es) const { return (send_count > recv_count ? send_count : recv_count) * es; }
};

// `elements` = table size / element size.
Layout GetLayout(Collective c, size_t elements, int nranks);

// The call's send and recv pointers for buffers `send` and `recv` (of
// `es`-byte elements): those themselves out of place; in place, both inside
// `recv` at the layout's offsets for `rank`.
void CallBuffers(const Layout& l, bool in_place, int rank, size_t es, unsigned char* send, unsigned char* recv,
                 const void** call_send, void** call_recv);

// algbw and busbw in GB/s (1e9 bytes) for one call of `l` taking `seconds`.
void Bandwidth(Collective c, const Layout& l, size_t es, int nranks, double seconds, double* algbw,
               double* busbw);

// OK for weftSuccess, else an error with weft's message for `call`.
absl::Status WeftStatus(const char* call, weftResult_t r);
// OK for MPI_SUCCESS, else an error with MPI's message for `call`.
absl::Status MpiStatus(const char* call, int err);

// One weft call. `stream`: NULL (blocking) or a weftStream_t.
absl::Status RunWeft(Collective c, const void* send, void* recv, size_t count, weftDataType_t t, weftRedOp_t op,
                     int root, weftComm_t comm, void* stream);

// The raw MPI collective of the same size on MPI_COMM_WORLD: MPI_Allreduce,
// MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast (of recvbuf; MPI has no
// out-of-place broadcast, so root's copy is not timed), MPI_Reduce,
// MPI_Gather, MPI_Scatter, MPI_Alltoall, MPI_Sendrecv.
absl::Status RunMpi(Collective c, const void* send, void* recv, size_t count, weftDataType_t t, weftRedOp_t op,
                    int root);
// False when MPI cannot do (c, t): reductions of float16 and bfloat16.
bool MpiCanRun(Collective c, weftDataType_t t);

}  // namespace weft_bench

#endif  // WEFT_BENCH_COLLECTIVES_H_
