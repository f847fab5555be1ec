// oneCCL's collectives (the CPU library under Intel's torch backend) as a
// peer of weft (bench/peers/run). It links no MPI of its own, so any
// launcher can start it: Open MPI's mpirun (oneCCL's OFI transport) or
// Intel MPI's mpiexec (CCL_ATL_TRANSPORT=mpi, which its OpenMP collectives
// need). The ranks meet through oneCCL's KVS: rank 0 creates the main KVS
// and publishes its address in the file $WEFT_PEERS_KVS, the others read it.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <oneapi/ccl.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/peers/peer.h"

namespace {

using weft_peers::Collective;

// The launcher's rank and size: Intel MPI's hydra (PMI_*) or Open MPI's.
int EnvInt(const char* a, const char* b) {
  for (const char* name : {a, b}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  throw std::runtime_error(std::string("neither ") + a + " nor " + b + " is set: launch with mpirun or mpiexec");
}

ccl::kvs::address_type Publish(const std::string& path, const ccl::kvs::address_type& addr) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(addr.data(), static_cast<std::streamsize>(addr.size()));
    if (!out) throw std::runtime_error("cannot write the KVS address to " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp);
  return addr;
}

ccl::kvs::address_type Read(const std::string& path) {
  ccl::kvs::address_type addr{};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(addr.data(), static_cast<std::streamsize>(addr.size()))) return addr;
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("no KVS address in " + path + " after 60 s: did rank 0 start?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

class OneCcl : public weft_peers::Library {
 public:
  OneCcl() : rank_(EnvInt("PMI_RANK", "OMPI_COMM_WORLD_RANK")), size_(EnvInt("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")) {
    const char* file = std::getenv("WEFT_PEERS_KVS");
    if (file == nullptr || *file == '\0') throw std::runtime_error("WEFT_PEERS_KVS (the KVS address file) is not set");
    ccl::init();
    std::shared_ptr<ccl::kvs> kvs;
    if (rank_ == 0) {
      kvs = ccl::create_main_kvs();
      Publish(file, kvs->get_address());
    } else {
      kvs = ccl::create_kvs(Read(file));
    }
    comm_ = std::make_unique<ccl::communicator>(ccl::create_communicator(size_, rank_, kvs));
    counts_.assign(static_cast<size_t>(size_), 0);
  }
  const char* Name() const override { return "oneccl"; }
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }
  bool Has(Collective) const override { return true; }
  void Barrier() override { ccl::barrier(*comm_).wait(); }

  void Run(Collective c, const float* send, float* recv, size_t count) override {
    const auto f32 = ccl::datatype::float32;
    switch (c) {
      case Collective::kAllReduce:
        return ccl::allreduce(send, recv, count, f32, ccl::reduction::sum, *comm_).wait();
      case Collective::kReduceScatter:
        return ccl::reduce_scatter(send, recv, count, f32, ccl::reduction::sum, *comm_).wait();
      case Collective::kAllGather:  // as torch-ccl calls it: allgatherv with equal counts
        counts_.assign(counts_.size(), count);
        return ccl::allgatherv(send, count, recv, counts_, f32, *comm_).wait();
      case Collective::kBroadcast: return ccl::broadcast(recv, count, f32, 0, *comm_).wait();
      case Collective::kAllToAll: return ccl::alltoall(send, recv, count, f32, *comm_).wait();
    }
  }

 private:
  int rank_, size_;
  std::unique_ptr<ccl::communicator> comm_;
  std::vector<size_t> counts_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    OneCcl lib;
    return weft_peers::PeerMain(argc, argv, lib);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oneccl: %s\n", e.what());
    return 2;
  }
}
