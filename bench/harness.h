// What weft-bench's ranks say to each other around the timed calls: the
// barrier before a timed loop, the combining of per-rank times (-a) and
// error counts, the "# Rank" lines. Never the timed calls themselves, which
// stay on the measured communicator.
//
// Two ways to say it. Under an MPI launcher (mpirun, mpiexec, srun with
// PMI/PMIx: see MpiLaunched), MPI_COMM_WORLD, and the process initialises MPI
// itself. Otherwise (torchrun's, Slurm's or weft's own variables, or no
// launcher at all) a second weft communicator split off the measured world,
// driven through the C ABI on host memory, so that the bench needs no MPI.
//
//   std::unique_ptr<Harness> h = MpiLaunched() ? MpiHarness() : *WeftHarness(world);
//   RETURN_IF_ERROR(h->Barrier());
//   ASSIGN_OR_RETURN(double slowest, h->AllReduce(seconds, Harness::Reduce::kMax));
#ifndef WEFT_BENCH_HARNESS_H_
#define WEFT_BENCH_HARNESS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weft/weft.h"

namespace weft_bench {

class Harness {
 public:
  enum class Reduce { kSum, kMin, kMax };
  // Bytes of one GatherLines line, its terminating NUL included.
  static constexpr size_t kLine = 256;

  virtual ~Harness() = default;
  virtual absl::Status Barrier() = 0;
  virtual absl::StatusOr<double> AllReduce(double v, Reduce r) = 0;
  virtual absl::StatusOr<int64_t> SumInt64(int64_t v) = 0;
  // Rank 0's `v` on every rank.
  virtual absl::StatusOr<double> Broadcast(double v) = 0;
  // Every rank's `line` (cut to kLine - 1 bytes), in rank order, on rank 0;
  // empty elsewhere.
  virtual absl::StatusOr<std::vector<std::string>> GatherLines(const std::string& line) = 0;
  // True for MPI_COMM_WORLD: the raw-MPI baseline can run.
  virtual bool mpi() const = 0;
};

// True when an MPI launcher started this process: one of its variables
// (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE, PMI_RANK, MPI_LOCALNRANKS,
// MV2_COMM_WORLD_SIZE) is set. Only then does weft-bench call MPI_Init.
bool MpiLaunched();

// This process's rank as its launcher tells it, before any communicator
// exists (for who explains a bad command line): torchrun's RANK, Slurm's
// SLURM_PROCID, weft's WEFT_RANK, in weftCommInitWorld's order; 0 if none.
// Not for MPI launches, which have MPI_Comm_rank.
int LauncherRank();

// The harness on MPI_COMM_WORLD; MPI must be initialised.
std::unique_ptr<Harness> MpiHarness();

// The harness on weftCommSplit(world, 0, rank) of the measured world (a
// host-memory communicator: weft-bench refuses CUDA memory). Collective over
// `world`. The harness owns the split communicator and destroys it.
absl::StatusOr<std::unique_ptr<Harness>> WeftHarness(weftComm_t world);

// "Open MPI v4.1.4": the MPI library's version line. MPI need not be initialised.
std::string MpiVersion();

}  // namespace weft_bench

#endif  // WEFT_BENCH_HARNESS_H_
