// weft-bench: nccl-tests' collective benchmark for weft, launched by mpirun
// or by anything weftCommInitWorld knows (torchrun, Slurm, WEFT_RANK).
//
//   mpirun -np 4 build/bench/weft-bench all_reduce -b 8 -e 64M -f 4 -c 1 --baseline mpi
//   tests/launch/launch.py --np 3 --as torchrun -- build/bench/weft-bench all_reduce -b 8 -e 1M -f 4 -c 1
//
// weft is driven only through its C ABI. The timing barriers, the combining
// of per-rank times and error counts and the rank lines go through a harness
// (bench/harness.h): MPI_COMM_WORLD when an MPI launcher started the process,
// else a second weft communicator split off the measured world. The raw-MPI
// baseline needs the former. Started without a launcher it runs one rank.
// CUDA memory (the NCCL backend) is not benchmarked yet: buffers are host memory.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/args.h"
#include "bench/harness.h"
#include "bench/runner.h"
#include "bench/table.h"
#include "bench/types.h"
#include "core/status.h"

namespace weft_bench {
namespace {

constexpr int kExitWrong = 1;
constexpr int kExitError = 2;

// A failure in the middle of collectives: the other ranks may be waiting in
// one, so take the whole job down rather than leave it hanging. Under MPI,
// MPI_Abort does; otherwise this process leaves, and the others' waits on it
// fail when its connections close, or at weft's timeout (WEFT_TIMEOUT_MS).
[[noreturn]] void Fail(bool mpi, int rank, const absl::Status& s) {
  std::fprintf(stderr, "weft-bench: rank %d: %s\n", rank, std::string(s.message()).c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (mpi) MPI_Abort(MPI_COMM_WORLD, kExitError);
  std::_Exit(kExitError);
}

// This rank's "# Rank" line.
std::string RankLine(int rank, const std::string& backend) {
  char host[128] = {};
  gethostname(host, sizeof(host) - 1);
  char line[Harness::kLine] = {};
  std::snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s device   host memory (weft backend %s)",
                rank, static_cast<int>(getpid()), host, backend.c_str());
  return line;
}

// Refusals that every rank reaches alike (bad flags, a world weft cannot
// span, a baseline without MPI): rank 0 explains, all leave cleanly with
// kExitError. `mpi_size`: MPI_COMM_WORLD's size, 0 when not MPI-launched.
absl::Status Validate(const Options& o, int nranks, int mpi_size, weftMemoryKind_t memory,
                      const std::string& backend) {
  if (o.baseline_mpi && mpi_size == 0) {
    return weft::InvalidArgument("--baseline mpi times MPI_COMM_WORLD's collectives, but no MPI launcher (mpirun, "
                                 "mpiexec, srun with PMI) started this job: launch it with mpirun, or drop "
                                 "--baseline");
  }
  if (mpi_size != 0 && nranks != mpi_size) {
    return weft::InvalidArgument("backend %s gave a %d-rank communicator but MPI_COMM_WORLD has %d ranks: it spans "
                                 "one process, so run it without mpirun (or use --backend mpi)",
                                 backend, nranks, mpi_size);
  }
  if (memory != weftMemoryHost) {
    return weft::Unsupported("backend %s works on CUDA memory, which weft-bench does not allocate yet", backend);
  }
  if (HasRoot(o.collective) && o.root >= nranks) {
    return weft::InvalidArgument("-r %d is not a rank of the %d-rank world", o.root, nranks);
  }
  return absl::OkStatus();
}

// `mpi_size`: MPI_COMM_WORLD's size, 0 when no MPI launcher started the job
// (then `launch_rank` is the launcher's word for this rank, until weft's world says).
int Main(int argc, char** argv, int launch_rank, int mpi_size) {
  const bool mpi = mpi_size != 0;
  absl::StatusOr<Options> parsed = ParseArgs(argc, argv);
  if (!parsed.ok() || parsed->help) {
    if (launch_rank == 0) {
      if (!parsed.ok()) std::fprintf(stderr, "weft-bench: %s\n\n", std::string(parsed.status().message()).c_str());
      std::fputs(Usage(argv[0]).c_str(), parsed.ok() ? stdout : stderr);
    }
    return parsed.ok() ? 0 : kExitError;
  }
  const Options& o = *parsed;

  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.backend = o.backend;
  World w;
  absl::Status s = WeftStatus("weftCommInitWorld", weftCommInitWorld(&w.comm, &config));
  weftBackend_t backend = weftBackendAuto;
  weftMemoryKind_t memory = weftMemoryHost;
  if (s.ok()) s = WeftStatus("weftCommCount", weftCommCount(w.comm, &w.nranks));
  if (s.ok()) s = WeftStatus("weftCommUserRank", weftCommUserRank(w.comm, &w.rank));
  if (s.ok()) s = WeftStatus("weftCommGetBackend", weftCommGetBackend(w.comm, &backend));
  if (s.ok()) s = WeftStatus("weftCommGetMemoryKind", weftCommGetMemoryKind(w.comm, &memory));
  if (!s.ok()) Fail(mpi, launch_rank, s);
  s = Validate(o, w.nranks, mpi_size, memory, BackendName(backend));
  if (!s.ok()) {
    if (w.rank == 0) std::fprintf(stderr, "weft-bench: %s\n", std::string(s.message()).c_str());
    weftCommDestroy(w.comm);
    return kExitError;
  }
  std::unique_ptr<Harness> harness;
  if (mpi) {
    harness = MpiHarness();
  } else {
    absl::StatusOr<std::unique_ptr<Harness>> split = WeftHarness(w.comm);
    if (!split.ok()) Fail(mpi, w.rank, split.status());
    harness = std::move(*split);
  }
  w.harness = harness.get();
  if (!o.stream_null) {
    s = WeftStatus("weftStreamCreate", weftStreamCreate(&w.stream));
    if (!s.ok()) Fail(mpi, w.rank, s);
  }

  RunInfo info;
  info.nranks = w.nranks;
  info.backend = BackendName(backend);
  int version = 0;
  weftGetVersion(&version);
  info.weft_version = absl::StrFormat("%d.%d.%d", version / 10000, version / 100 % 100, version % 100);
  info.mpi_version = mpi ? MpiVersion() : "none";
  absl::StatusOr<std::vector<std::string>> lines = harness->GatherLines(RankLine(w.rank, info.backend));
  if (!lines.ok()) Fail(mpi, w.rank, lines.status());
  info.rank_lines = *lines;
  const bool print = w.rank == 0;
  if (print) {
    PrintPreamble(o, info);
    PrintHeader(o);
  }

  absl::StatusOr<std::unique_ptr<Runner>> runner = Runner::Create(o, w);
  if (!runner.ok()) Fail(mpi, w.rank, runner.status());
  std::vector<Row> rows;
  Totals totals;
  for (weftDataType_t t : o.types) {
    const std::vector<weftRedOp_t> ops = Reduces(o.collective) ? o.ops : std::vector<weftRedOp_t>{weftSum};
    for (weftRedOp_t op : ops) {
      s = (*runner)->Warmup(t, op);
      if (!s.ok()) Fail(mpi, w.rank, s);
      for (size_t size = o.min_bytes; size <= o.max_bytes;
           size = o.step_factor > 1 ? size * o.step_factor : size + o.step_bytes) {
        absl::StatusOr<Row> row = (*runner)->Run(size, t, op);
        if (!row.ok()) Fail(mpi, w.rank, row.status());
        totals.Add(*row);
        rows.push_back(*row);
        if (print) PrintRow(o, *row);
        if (size == 0 && o.step_factor > 1) break;  // 0 * factor would never reach -e
      }
    }
  }
  if (print) {
    PrintFooter(o, totals);
    if (!o.json_path.empty()) {
      s = WriteJson(o.json_path, o, info, rows, totals);
      if (!s.ok()) std::fprintf(stderr, "weft-bench: %s\n", std::string(s.message()).c_str());
    }
  }
  runner->reset();
  if (w.stream != nullptr) weftStreamDestroy(w.stream);
  harness.reset();  // its communicator was split off w.comm
  weftCommDestroy(w.comm);
  if (totals.wrong != 0) return kExitWrong;
  return s.ok() ? 0 : kExitError;
}

}  // namespace
}  // namespace weft_bench

int main(int argc, char** argv) {
  setlinebuf(stdout);
  if (!weft_bench::MpiLaunched()) return weft_bench::Main(argc, argv, weft_bench::LauncherRank(), 0);
  // weft may call MPI from its host-stream threads: ask for full thread support.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int code = weft_bench::Main(argc, argv, rank, size);
  MPI_Finalize();
  return code;
}
