// One peer library's side of bench/peers/run: the same sizes, timing loop,
// buffers and checks as weft-bench, over another library's collectives.
//
// A peer program implements Library for its library (Open MPI in
// mpi_peer.cc, oneCCL in oneccl_peer.cc) and hands it to PeerMain, which
// parses weft-bench's size flags, times every collective the library has,
// checks every element every rank received, and writes this rank's rows as
// JSON (`--out PREFIX` -> PREFIX.rank<N>.json). bench/peers/run combines the
// ranks' files: times are the mean over ranks, as weft-bench's -a 1.
//
//   int main(int argc, char** argv) { MyLibrary lib(&argc, &argv); return weft_peers::PeerMain(argc, argv, lib); }
//
// Sizes follow nccl-tests: the size of all_gather, reduce_scatter and
// alltoall is the whole n-block buffer; every element is a float32.
#ifndef WEFT_BENCH_PEERS_PEER_H_
#define WEFT_BENCH_PEERS_PEER_H_

#include <cstddef>
#include <string>

namespace weft_peers {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll };

const char* CollectiveName(Collective c);

class Library {
 public:
  virtual ~Library() = default;
  virtual const char* Name() const = 0;
  virtual int Rank() const = 0;
  virtual int Size() const = 0;
  virtual bool Has(Collective c) const = 0;
  virtual void Barrier() = 0;
  // One blocking float32 collective (sum for the reductions, root 0 for
  // broadcast). `count` is weft-bench's: all_reduce and broadcast elements,
  // reduce_scatter's output block, all_gather's input block, alltoall's
  // block per peer. Errors throw std::runtime_error naming the call.
  virtual void Run(Collective c, const float* send, float* recv, size_t count) = 0;
};

// Returns the process's exit status: 0 when every checked value was right,
// 1 when any was wrong, 2 on bad arguments or a failed call.
int PeerMain(int argc, char** argv, Library& lib);

}  // namespace weft_peers

#endif  // WEFT_BENCH_PEERS_PEER_H_
