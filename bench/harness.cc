#include "bench/harness.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "bench/collectives.h"
#include "core/status.h"

namespace weft_bench {
namespace {

// One line in a fixed kLine-byte slot, NUL-padded.
std::vector<char> Slot(const std::string& line) {
  std::vector<char> slot(Harness::kLine, '\0');
  std::memcpy(slot.data(), line.data(), std::min(line.size(), Harness::kLine - 1));
  return slot;
}

std::vector<std::string> Lines(const std::vector<char>& all, int nranks) {
  std::vector<std::string> out;
  for (int r = 0; r < nranks; ++r) out.emplace_back(&all[static_cast<size_t>(r) * Harness::kLine]);
  return out;
}

class MpiWorld final : public Harness {
 public:
  absl::Status Barrier() override { return MpiStatus("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD)); }

  absl::StatusOr<double> AllReduce(double v, Reduce r) override {
    const MPI_Op op = r == Reduce::kSum ? MPI_SUM : r == Reduce::kMin ? MPI_MIN : MPI_MAX;
    RETURN_IF_ERROR(MpiStatus("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, op, MPI_COMM_WORLD)));
    return v;
  }

  absl::StatusOr<int64_t> SumInt64(int64_t v) override {
    RETURN_IF_ERROR(
        MpiStatus("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD)));
    return v;
  }

  absl::StatusOr<double> Broadcast(double v) override {
    RETURN_IF_ERROR(MpiStatus("MPI_Bcast", MPI_Bcast(&v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD)));
    return v;
  }

  absl::StatusOr<std::vector<std::string>> GatherLines(const std::string& line) override {
    int rank = 0;
    int nranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const std::vector<char> mine = Slot(line);
    std::vector<char> all(rank == 0 ? kLine * static_cast<size_t>(nranks) : 0);
    RETURN_IF_ERROR(MpiStatus("MPI_Gather", MPI_Gather(mine.data(), static_cast<int>(kLine), MPI_CHAR, all.data(),
                                                     static_cast<int>(kLine), MPI_CHAR, 0, MPI_COMM_WORLD)));
    if (rank != 0) return std::vector<std::string>{};
    return Lines(all, nranks);
  }

  bool mpi() const override { return true; }
};

// Host memory, blocking calls (stream NULL) on a communicator of its own, so
// that nothing the harness sends is ordered among the measured calls.
class WeftSplit final : public Harness {
 public:
  WeftSplit(weftComm_t comm, int rank, int nranks) : comm_(comm), rank_(rank), nranks_(nranks) {}
  ~WeftSplit() override { weftCommDestroy(comm_); }
  WeftSplit(const WeftSplit&) = delete;
  WeftSplit& operator=(const WeftSplit&) = delete;

  absl::Status Barrier() override { return WeftStatus("weftBarrier", weftBarrier(comm_)); }

  absl::StatusOr<double> AllReduce(double v, Reduce r) override {
    const weftRedOp_t op = r == Reduce::kSum ? weftSum : r == Reduce::kMin ? weftMin : weftMax;
    RETURN_IF_ERROR(WeftStatus("weftAllReduce", weftAllReduce(&v, &v, 1, weftFloat64, op, comm_, nullptr)));
    return v;
  }

  absl::StatusOr<int64_t> SumInt64(int64_t v) override {
    RETURN_IF_ERROR(WeftStatus("weftAllReduce", weftAllReduce(&v, &v, 1, weftInt64, weftSum, comm_, nullptr)));
    return v;
  }

  absl::StatusOr<double> Broadcast(double v) override {
    RETURN_IF_ERROR(WeftStatus("weftBroadcast", weftBroadcast(&v, &v, 1, weftFloat64, 0, comm_, nullptr)));
    return v;
  }

  // weft has no gather: every rank gathers, rank 0 keeps the lines. They
  // are printed once, before the table, so the extra bytes cost nothing timed.
  absl::StatusOr<std::vector<std::string>> GatherLines(const std::string& line) override {
    const std::vector<char> mine = Slot(line);
    std::vector<char> all(kLine * static_cast<size_t>(nranks_));
    RETURN_IF_ERROR(WeftStatus("weftAllGather", weftAllGather(mine.data(), all.data(), kLine, weftUint8, comm_,
                                                              nullptr)));
    if (rank_ != 0) return std::vector<std::string>{};
    return Lines(all, nranks_);
  }

  bool mpi() const override { return false; }

 private:
  weftComm_t comm_;
  const int rank_;
  const int nranks_;
};

}  // namespace

bool MpiLaunched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
                        "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

int LauncherRank() {
  for (const char* v : {"RANK", "SLURM_PROCID", "WEFT_RANK"}) {
    if (const char* s = std::getenv(v); s != nullptr) return std::atoi(s);
  }
  return 0;
}

std::unique_ptr<Harness> MpiHarness() { return std::make_unique<MpiWorld>(); }

absl::StatusOr<std::unique_ptr<Harness>> WeftHarness(weftComm_t world) {
  int rank = 0;
  int nranks = 1;
  RETURN_IF_ERROR(WeftStatus("weftCommUserRank", weftCommUserRank(world, &rank)));
  RETURN_IF_ERROR(WeftStatus("weftCommCount", weftCommCount(world, &nranks)));
  weftComm_t split = nullptr;
  RETURN_IF_ERROR(WeftStatus("weftCommSplit", weftCommSplit(world, 0, rank, &split)));
  return std::unique_ptr<Harness>(new WeftSplit(split, rank, nranks));
}

std::string MpiVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string v(text, static_cast<size_t>(len));
  return v.substr(0, v.find_first_of(",\n"));  // "Open MPI v4.1.4"
}

}  // namespace weft_bench
