// weft-check: validates a cluster's collectives before a job runs on it,
// and names the bad, slow or hung ranks, nodes and links (docs/harness.md).
//
//   mpirun -np 16 build/bench/check/weft-check --plan quick --json report.json
//   torchrun --nproc-per-node 8 --no-python build/bench/check/weft-check
//   build/bench/check/weft-check --ranks 4         # four in-process ranks
//   mpirun -np 8 build/bench/check/weft-check --memory cuda   # NCCL, one GPU per rank
//
// Driven only through weft's C ABI. Every rank runs the same plan (main.cc
// -> phases.h); rank 0 prints the summary, writes the JSON and the plots.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/check/memory.h"
#include "bench/check/options.h"
#include "bench/check/phases.h"
#include "bench/check/rank.h"
#include "bench/check/report.h"
#include "bench/check/verdict.h"
#include "core/status.h"

namespace weft_check {
namespace {

constexpr int kExitFail = 1;
constexpr int kExitError = 2;

const char* BackendName(weftBackend_t b) {
  switch (b) {
    case weftBackendInProcess: return "inprocess";
    case weftBackendMpi: return "mpi";
    case weftBackendNccl: return "nccl";
    case weftBackendUcx: return "ucx";
    default: return "auto";
  }
}

// Every measurement on this rank; each rank ends with the same report.
absl::Status Measure(Rank& r, Report* rep) {
  RETURN_IF_ERROR(RunCorrectness(r, rep));
  const bool wrong = JudgeCorrectness(rep);
  RETURN_IF_ERROR(RunSpeed(r, rep));
  RETURN_IF_ERROR(RunPairs(r, rep));
  JudgeSpeed(rep);
  const bool slow = !rep->slow_ranks.empty() || !rep->bad_links.empty();
  if (wrong || slow) {
    RETURN_IF_ERROR(RunBisection(r, wrong ? "wrong" : "slow", rep));
    JudgeBisection(rep);
  }
  // Every rank has finished before any leaves.
  return r.Gather("done", "finishing").status();
}

// Runs `python plot.py report.json DIR`: matplotlib from the Python
// environment ($WEFT_CHECK_PYTHON, else python3 on PATH).
absl::Status Plot(const std::string& json, const std::string& dir) {
  const char* env = std::getenv("WEFT_CHECK_PYTHON");
  const std::string python = env != nullptr && *env != '\0' ? env : "python3";
  const std::string script = WEFT_CHECK_PLOT_SCRIPT;
  const pid_t pid = fork();
  if (pid < 0) return weft::SystemError("--plot: fork failed");
  if (pid == 0) {
    execlp(python.c_str(), python.c_str(), script.c_str(), json.c_str(), dir.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "weft-check: --plot: cannot run %s\n", python.c_str());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return weft::SystemError("--plot %s: %s %s failed (status %d); is matplotlib installed in that Python? "
                             "(WEFT_CHECK_PYTHON chooses the interpreter)", dir, python, script, status);
  }
  return absl::OkStatus();
}

// Rank 0's last word: the summary, the JSON, the plots. Returns the exit code.
int Conclude(const Options& o, Report& rep) {
  for (const std::string& line : Summary(rep)) std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  std::string json = o.json_path;
  if (json.empty() && !o.plot_dir.empty()) json = o.plot_dir + "/report.json";
  int code = rep.pass() ? 0 : kExitFail;
  if (!o.plot_dir.empty()) mkdir(o.plot_dir.c_str(), 0755);
  if (!json.empty()) {
    const absl::Status s = WriteJson(json, rep);
    if (!s.ok()) {
      std::fprintf(stderr, "weft-check: %s\n", std::string(s.message()).c_str());
      return kExitError;
    }
  }
  if (!o.plot_dir.empty()) {
    const absl::Status s = Plot(json, o.plot_dir);
    if (!s.ok()) {
      std::fprintf(stderr, "weft-check: %s\n", std::string(s.message()).c_str());
      return kExitError;
    }
  }
  return code;
}

// One rank, start to end. `failed`: the error that ended its run early.
absl::Status RunRank(Rank& r, Report* rep, bool* made_dir) {
  RETURN_IF_ERROR(r.Start(made_dir));
  rep->ranks = r.everyone();
  return Measure(r, rep);
}

Report Blank(const Options& o, int n, weftComm_t world) {
  Report rep;
  rep.plan = o.plan.name;
  rep.nranks = n;
  weftBackend_t b = weftBackendAuto;
  weftCommGetBackend(world, &b);
  rep.backend = BackendName(b);
  rep.memory = o.memory == weftMemoryCuda ? "cuda" : "host";
  rep.slow_ratio = o.slow_ratio;
  rep.slow_floor_us = o.slow_floor_us;
  return rep;
}

void Cleanup(Rank& r, bool made_dir) {
  const std::string dir = r.heartbeat_dir();
  r.StopHeartbeat();
  if (dir.empty()) return;
  std::remove(BeatPath(dir, r.rank()).c_str());
  if (made_dir || r.options().heartbeat_dir.empty()) rmdir(dir.c_str());  // the last rank out removes it
}

int Main(int argc, char** argv) {
  absl::StatusOr<Options> parsed = ParseArgs(argc, argv);
  if (!parsed.ok() || parsed->help) {
    if (!parsed.ok()) std::fprintf(stderr, "weft-check: %s\n\n", std::string(parsed.status().message()).c_str());
    std::fputs(Usage(argv[0]).c_str(), parsed.ok() ? stdout : stderr);
    return parsed.ok() ? 0 : kExitError;
  }
  const Options& o = *parsed;
  if (o.memory == weftMemoryCuda) {
    // Device buffers, the NCCL backend, each rank on its local device (weft's choice: the launcher's local
    // rank modulo the device count).
    const absl::Status usable = CudaUsable();
    if (!usable.ok()) {
      std::fprintf(stderr, "weft-check: %s\n", std::string(usable.message()).c_str());
      return kExitError;
    }
    if (o.ranks > 1) {
      std::fprintf(stderr, "weft-check: --memory cuda with --ranks %d: in-process ranks work on host memory; launch "
                           "one process per GPU (mpirun, srun, torchrun)\n", o.ranks);
      return kExitError;
    }
  }
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.backend = o.backend;
  config.memory = o.memory;
  config.timeout_ms = o.timeout_ms;
  std::vector<weftComm_t> comms;
  if (o.ranks > 1) {
    if (o.backend != weftBackendAuto) {
      std::fprintf(stderr, "weft-check: --backend runs the ranks of a launched job; --ranks %d runs in-process "
                           "ranks\n", o.ranks);
      return kExitError;
    }
    comms.resize(o.ranks);
    const weftResult_t res = weftCommInitInProcess(comms.data(), o.ranks, &config);
    if (res != weftSuccess) {
      std::fprintf(stderr, "weft-check: %s\n", std::string(WeftError("weftCommInitInProcess", res).message()).c_str());
      return kExitError;
    }
  } else {
    comms.resize(1);
    const weftResult_t res = weftCommInitWorld(&comms[0], &config);
    if (res != weftSuccess) {
      std::fprintf(stderr, "weft-check: %s\n", std::string(WeftError("weftCommInitWorld", res).message()).c_str());
      return kExitError;
    }
  }
  int n = 0, rank0 = 0;
  weftCommCount(comms[0], &n);
  weftCommUserRank(comms[0], &rank0);
  if (o.ranks > 1 && n != o.ranks) {
    std::fprintf(stderr, "weft-check: --ranks %d gave a %d-rank world\n", o.ranks, n);
    return kExitError;
  }

  // One Rank per communicator of this process: a thread each in-process.
  std::vector<std::unique_ptr<Rank>> ranks;
  std::vector<Report> reports;
  std::vector<absl::Status> status(comms.size());
  std::vector<char> made(comms.size(), 0);
  for (size_t i = 0; i < comms.size(); ++i) {
    int me = 0;
    weftCommUserRank(comms[i], &me);
    ranks.push_back(std::make_unique<Rank>(comms[i], me, n, o));
    reports.push_back(Blank(o, n, comms[i]));
  }
  const auto body = [&](size_t i) {
    bool m = false;
    status[i] = RunRank(*ranks[i], &reports[i], &m);
    made[i] = m;
    if (status[i].ok() && ranks[i]->heartbeat() != nullptr) ranks[i]->heartbeat()->SetState("done");
  };
  if (comms.size() == 1) {
    body(0);
  } else {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < comms.size(); ++i) threads.emplace_back(body, i);
    for (auto& t : threads) t.join();
  }

  int code = 0;
  for (size_t i = 0; i < comms.size(); ++i) {
    Rank& r = *ranks[i];
    if (!status[i].ok()) {
      std::fprintf(stderr, "weft-check: rank %d: %s\n", r.rank(), std::string(status[i].message()).c_str());
      code = kExitFail;
    }
    if (r.rank() != 0) continue;
    Report& rep = reports[i];
    if (!status[i].ok()) {
      rep.errors.push_back(std::string(status[i].message()));
      if (r.heartbeat() != nullptr) {
        // Let every rank's heartbeat thread write its last state.
        std::this_thread::sleep_for(std::chrono::milliseconds(5 * Heartbeat::kPeriodMs));
        JudgeHang(r.Beats(), r.heartbeat_channel(), &rep);
      }
    }
    const int c = Conclude(o, rep);
    if (c != 0) code = c;
  }
  for (size_t i = 0; i < comms.size(); ++i) {
    // A rank that failed keeps its heartbeat a moment for rank 0 to read.
    if (!status[i].ok() && ranks[i]->rank() != 0 && comms.size() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    Cleanup(*ranks[i], made[i]);
  }
  for (weftComm_t c : comms) weftCommDestroy(c);
  return code;
}

}  // namespace
}  // namespace weft_check

int main(int argc, char** argv) {
  setlinebuf(stdout);
  return weft_check::Main(argc, argv);
}
