// Open MPI's own collectives as a peer of weft (bench/peers/run): which
// coll component runs them (tuned, han) is chosen by mpirun's --mca flags.
#include <mpi.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "bench/peers/peer.h"

namespace {

using weft_peers::Collective;

void Check(const char* call, int err) {
  if (err == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, text, &len);
  throw std::runtime_error(std::string(call) + ": " + std::string(text, len));
}

class Mpi : public weft_peers::Library {
 public:
  Mpi(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~Mpi() override { MPI_Finalize(); }
  const char* Name() const override { return "mpi"; }
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  bool Has(Collective) const override { return true; }
  void Barrier() override { Check("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD)); }

  void Run(Collective c, const float* send, float* recv, size_t count) override {
    if (count > static_cast<size_t>(INT32_MAX) / static_cast<size_t>(size_)) {
      throw std::runtime_error("count " + std::to_string(count) + " does not fit MPI's int counts");
    }
    const int n = static_cast<int>(count);
    switch (c) {
      case Collective::kAllReduce:
        return Check("MPI_Allreduce", MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
      case Collective::kReduceScatter:
        return Check("MPI_Reduce_scatter_block",
                     MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
      case Collective::kAllGather:
        return Check("MPI_Allgather", MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD));
      case Collective::kBroadcast: return Check("MPI_Bcast", MPI_Bcast(recv, n, MPI_FLOAT, 0, MPI_COMM_WORLD));
      case Collective::kAllToAll:
        return Check("MPI_Alltoall", MPI_Alltoall(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD));
    }
  }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

int main(int argc, char** argv) {
  Mpi mpi(&argc, &argv);
  return weft_peers::PeerMain(argc, argv, mpi);
}
