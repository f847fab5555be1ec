// weft-bench: nccl-tests' collective benchmark for weft, MPI-launched.
//
//   mpirun -np 4 build/bench/weft-bench all_reduce -b 8 -e 64M -f 4 -c 1 --baseline mpi
//
// weft is driven only through its C ABI; MPI (MPI_COMM_WORLD) serves the
// timing barriers, the combining of per-rank times and error counts, and the
// raw-MPI baseline. Started without a launcher it runs one rank. CUDA memory
// (the NCCL backend) is not benchmarked yet: buffers are host memory.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/args.h"
#include "bench/runner.h"
#include "bench/table.h"
#include "bench/types.h"
#include "core/status.h"

namespace weft_bench {
namespace {

constexpr int kExitWrong = 1;
constexpr int kExitError = 2;

// A failure in the middle of collectives: the other ranks may be waiting in
// one, so take the whole job down rather than leave it hanging.
[[noreturn]] void Fail(int rank, const absl::Status& s) {
  std::fprintf(stderr, "weft-bench: rank %d: %s\n", rank, std::string(s.message()).c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, kExitError);
  std::_Exit(kExitError);  // MPI_Abort does not return; this tells the compiler so
}

std::string MpiVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string v(text, static_cast<size_t>(len));
  return v.substr(0, v.find_first_of(",\n"));  // "Open MPI v4.1.4"
}

// Every rank's "# Rank" line, gathered in rank order on rank 0.
std::vector<std::string> RankLines(int rank, int nranks, const std::string& backend) {
  constexpr int kLine = 256;
  char host[128] = {};
  gethostname(host, sizeof(host) - 1);
  char line[kLine] = {};
  std::snprintf(line, sizeof(line), "#  Rank %2d Group  0 Pid %6d on %10s device   host memory (weft backend %s)",
                rank, static_cast<int>(getpid()), host, backend.c_str());
  std::vector<char> all(rank == 0 ? static_cast<size_t>(kLine) * nranks : 0);
  MPI_Gather(line, kLine, MPI_CHAR, all.data(), kLine, MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; rank == 0 && r < nranks; ++r) out.emplace_back(&all[static_cast<size_t>(r) * kLine]);
  return out;
}

// Refusals that every rank reaches alike (bad flags, a world weft cannot
// span): rank 0 explains, all leave cleanly with kExitError.
absl::Status Validate(const Options& o, int nranks, int mpi_size, weftMemoryKind_t memory,
                      const std::string& backend) {
  if (nranks != mpi_size) {
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

int Main(int argc, char** argv, int mpi_rank, int mpi_size) {
  absl::StatusOr<Options> parsed = ParseArgs(argc, argv);
  if (!parsed.ok() || parsed->help) {
    if (mpi_rank == 0) {
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
  if (!s.ok()) Fail(mpi_rank, s);
  s = Validate(o, w.nranks, mpi_size, memory, BackendName(backend));
  if (!s.ok()) {
    if (mpi_rank == 0) std::fprintf(stderr, "weft-bench: %s\n", std::string(s.message()).c_str());
    weftCommDestroy(w.comm);
    return kExitError;
  }
  if (!o.stream_null) {
    s = WeftStatus("weftStreamCreate", weftStreamCreate(&w.stream));
    if (!s.ok()) Fail(w.rank, s);
  }

  RunInfo info;
  info.nranks = w.nranks;
  info.backend = BackendName(backend);
  int version = 0;
  weftGetVersion(&version);
  info.weft_version = absl::StrFormat("%d.%d.%d", version / 10000, version / 100 % 100, version % 100);
  info.mpi_version = MpiVersion();
  info.rank_lines = RankLines(mpi_rank, mpi_size, info.backend);
  const bool print = mpi_rank == 0;
  if (print) {
    PrintPreamble(o, info);
    PrintHeader(o);
  }

  absl::StatusOr<std::unique_ptr<Runner>> runner = Runner::Create(o, w);
  if (!runner.ok()) Fail(w.rank, runner.status());
  std::vector<Row> rows;
  Totals totals;
  for (weftDataType_t t : o.types) {
    const std::vector<weftRedOp_t> ops = Reduces(o.collective) ? o.ops : std::vector<weftRedOp_t>{weftSum};
    for (weftRedOp_t op : ops) {
      s = (*runner)->Warmup(t, op);
      if (!s.ok()) Fail(w.rank, s);
      for (size_t size = o.min_bytes; size <= o.max_bytes;
           size = o.step_factor > 1 ? size * o.step_factor : size + o.step_bytes) {
        absl::StatusOr<Row> row = (*runner)->Run(size, t, op);
        if (!row.ok()) Fail(w.rank, row.status());
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
  weftCommDestroy(w.comm);
  if (totals.wrong != 0) return kExitWrong;
  return s.ok() ? 0 : kExitError;
}

}  // namespace
}  // namespace weft_bench

int main(int argc, char** argv) {
  setlinebuf(stdout);
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
