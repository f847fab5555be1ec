// One rank of a fault-injection run (faults.py starts the world under mpirun
// or launch.py and checks what every process printed and left behind).
//
//   fault_rank BACKEND SCENARIO
//     BACKEND   mpi, ucx or auto (the launcher's)
//     SCENARIO  kill: a long all-reduce loop in which the victim (rank 1)
//                 kills itself with SIGKILL; every survivor must get an error
//                 naming rank 1 as dead well within its timeout, destroy its
//                 communicator and exit 0;
//               late: the last rank skips the 4th all-reduce (and waits past
//                 the timeout before it destroys its communicator); every
//                 other rank's call must time out with the hang report:
//                 the late rank not arrived, its last completed call named;
//               soak: 10,000 collectives (all-reduce, broadcast, all-gather,
//                 reduce-scatter, barrier, in turn; 1,000 warm-up calls
//                 first), every result checked, and the resident set may not
//                 grow by more than kSoakGrowthBytes over them;
//               steps: 1,000 reducer steps and 1,000 shard-group steps
//                 (soak_steps.h; 100 of each to warm up), every result
//                 checked, the resident set as flat as for soak.
//     BACKEND inproc (steps only) runs NP ranks (default 2) as threads of
//     this one process: fault_rank inproc steps [NP].
//
// Each survivor prints "fault_rank R: PASS pid P ..." or "fault_rank R: FAIL why".
// WEFT_TIMEOUT_MS gives the timeout (faults.py: a few seconds).
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/registry.h"
#include "core/env.h"
#include "tests/faults/soak_steps.h"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kVictim = 1;
constexpr int kVictimDiesAt = 40;   // loop iterations before the victim dies
constexpr size_t kCount = 64 << 10;  // floats per all-reduce: past the direct path, into the ring

long long MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int Fail(int rank, const std::string& why) {
  std::printf("fault_rank %d: FAIL %s\n", rank, why.c_str());
  std::fflush(stdout);
  return 1;
}

int Pass(int rank, const std::string& what) {
  std::printf("fault_rank %d: PASS pid %d %s\n", rank, static_cast<int>(getpid()), what.c_str());
  std::fflush(stdout);
  return 0;
}

int Kill(std::unique_ptr<Communicator> comm) {
  const int r = comm->rank(), n = comm->size();
  const int timeout = comm->options().timeout_ms;
  std::vector<float> in(kCount, 1.0f), out(kCount);
  absl::Status s;
  Clock::time_point since = Clock::now();
  for (int i = 0; i < 1000000 && s.ok(); ++i) {
    if (r == kVictim && i == kVictimDiesAt) raise(SIGKILL);  // kill -9, mid-loop
    since = Clock::now();
    s = comm->AllReduce(in.data(), out.data(), kCount, DataType::kFloat32, RedOp::kSum, nullptr);
    if (s.ok() && out[kCount - 1] != static_cast<float>(n)) return Fail(r, "wrong sum before the fault");
  }
  const long long waited = MsSince(since);
  const std::string m(s.message());
  comm.reset();  // destroy, which must not wait for the dead rank
  if (s.ok()) return Fail(r, "the loop ended without an error");
  if (!Has(m, "rank " + std::to_string(kVictim)) || !Has(m, "dead") || !Has(m, "node")) {
    return Fail(r, "the error does not name rank 1 as dead with its node: " + m);
  }
  if (waited >= timeout) return Fail(r, "the error took " + std::to_string(waited) + " ms, the timeout is " +
                                            std::to_string(timeout) + ": " + m);
  return Pass(r, "error after " + std::to_string(waited) + " ms: " + m);
}

int Late(std::unique_ptr<Communicator> comm) {
  const int r = comm->rank(), n = comm->size();
  const int timeout = comm->options().timeout_ms;
  std::vector<float> in(1000, 1.0f), out(1000);
  for (int i = 0; i < 3; ++i) {
    const absl::Status s = comm->AllReduce(in.data(), out.data(), in.size(), DataType::kFloat32, RedOp::kSum, nullptr);
    if (!s.ok()) return Fail(r, "call " + std::to_string(i + 1) + ": " + std::string(s.message()));
  }
  if (r == n - 1) {
    // Alive but late: its peers must time out (not call it dead).
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout + 2000));
    return Pass(r, "skipped call #4");
  }
  const auto t0 = Clock::now();
  const absl::Status s = comm->AllReduce(in.data(), out.data(), in.size(), DataType::kFloat32, RedOp::kSum, nullptr);
  const long long waited = MsSince(t0);
  const std::string m(s.message());
  if (!absl::IsDeadlineExceeded(s)) return Fail(r, "expected a timeout, got " + s.ToString());
  const std::string late = std::to_string(n - 1);
  const char* const want[] = {"in call #4 all_reduce(count 1000, float32, sum)"};
  for (const char* w : want) {
    if (!Has(m, w)) return Fail(r, std::string("the report lacks \"") + w + "\": " + m);
  }
  if (!Has(m, "not arrived: rank(s) {" + late + "}") ||
      !Has(m, "rank " + late + " (pid ") ||
      !Has(m, "last completed #3 all_reduce(count 1000, float32, sum)")) {
    return Fail(r, "the report does not show rank " + late + " not arrived after call #3: " + m);
  }
  if (waited > timeout + 5000) return Fail(r, "the timeout took " + std::to_string(waited) + " ms");
  return Pass(r, "timed out after " + std::to_string(waited) + " ms: " + m);
}

constexpr int kSoakCalls = 10000;
constexpr int kSoakWarmup = 1000;
// Growth allowed over the soak: allocator noise, not a leak per call (a
// leak of 100 bytes per call would be 1 MB).
constexpr long long kSoakGrowthBytes = 512 << 10;

using soak::ResidentBytes;

int Soak(std::unique_ptr<Communicator> comm) {
  const int r = comm->rank(), n = comm->size();
  const size_t count = 1024;  // 4 KiB of float32
  std::vector<float> in(count * static_cast<size_t>(n), static_cast<float>(r + 1)), out(in.size());
  const float sum = static_cast<float>(n * (n + 1) / 2);
  long long before = 0;
  for (int i = 0; i < kSoakWarmup + kSoakCalls; ++i) {
    if (i == kSoakWarmup) before = ResidentBytes();
    absl::Status s;
    bool right = true;
    switch (i % 5) {
      case 0:
        s = comm->AllReduce(in.data(), out.data(), count, DataType::kFloat32, RedOp::kSum, nullptr);
        right = out[count - 1] == sum;
        break;
      case 1:
        out[0] = -1;
        s = comm->Broadcast(in.data(), out.data(), count, DataType::kFloat32, i % n, nullptr);
        right = out[0] == static_cast<float>(i % n + 1);
        break;
      case 2:
        s = comm->AllGather(in.data(), out.data(), count, DataType::kFloat32, nullptr);
        right = out[count * static_cast<size_t>(n) - 1] == static_cast<float>(n);
        break;
      case 3:
        s = comm->ReduceScatter(in.data(), out.data(), count, DataType::kFloat32, RedOp::kSum, nullptr);
        right = out[count - 1] == sum;
        break;
      default:
        s = comm->Barrier();
    }
    if (!s.ok()) return Fail(r, "call " + std::to_string(i) + ": " + std::string(s.message()));
    if (!right) return Fail(r, "call " + std::to_string(i) + " gave a wrong result");
  }
  const long long growth = ResidentBytes() - before;
  if (growth > kSoakGrowthBytes) {
    return Fail(r, "the resident set grew by " + std::to_string(growth) + " bytes over " +
                       std::to_string(kSoakCalls) + " collectives");
  }
  return Pass(r, std::to_string(kSoakCalls) + " collectives, resident set " + std::to_string(growth) + " bytes");
}

constexpr int kSteps = 1000;
constexpr int kStepWarmup = 100;

std::string StepsDone(long long growth) {
  return std::to_string(kSteps) + " reducer and " + std::to_string(kSteps) + " shard-group steps, resident set " +
         std::to_string(growth) + " bytes";
}

int Steps(std::unique_ptr<Communicator> comm) {
  const int r = comm->rank();
  soak::StepSoak soak(comm.get());
  absl::Status s = soak.Create();
  if (s.ok()) s = soak.Run(kStepWarmup);
  const long long before = ResidentBytes();
  if (s.ok()) s = soak.Run(kSteps);
  if (!s.ok()) return Fail(r, std::string(s.message()));
  const long long growth = ResidentBytes() - before;
  if (growth > kSoakGrowthBytes) return Fail(r, "the resident set grew over " + StepsDone(growth));
  return Pass(r, StepsDone(growth));
}

// The same with `np` in-process ranks (threads); the resident set is the
// whole process's, measured between the phases while no rank runs.
int InProcessSteps(int np) {
  const BackendFactory* f = FindBackend(Backend::kInProcess);
  if (f == nullptr || f->init_local == nullptr) return Fail(-1, "no in-process backend");
  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> comms = f->init_local(np, CommOptions{});
  if (!comms.ok()) return Fail(-1, "no in-process world: " + comms.status().ToString());
  std::vector<std::unique_ptr<soak::StepSoak>> soaks;
  for (auto& c : *comms) soaks.push_back(std::make_unique<soak::StepSoak>(c.get()));
  std::vector<absl::Status> status(static_cast<size_t>(np));
  auto phase = [&](bool create, int steps) {
    std::vector<std::thread> threads;
    for (int r = 0; r < np; ++r) {
      threads.emplace_back([&, r] {
        absl::Status& s = status[static_cast<size_t>(r)];
        if (s.ok() && create) s = soaks[static_cast<size_t>(r)]->Create();
        if (s.ok()) s = soaks[static_cast<size_t>(r)]->Run(steps);
      });
    }
    for (std::thread& t : threads) t.join();
  };
  phase(true, kStepWarmup);
  const long long before = ResidentBytes();
  phase(false, kSteps);
  const long long growth = ResidentBytes() - before;
  int rc = 0;
  for (int r = 0; r < np; ++r) {
    const absl::Status& s = status[static_cast<size_t>(r)];
    if (!s.ok()) rc |= Fail(r, std::string(s.message()));
    else if (growth > kSoakGrowthBytes) rc |= Fail(r, "the resident set grew over " + StepsDone(growth));
    else rc |= Pass(r, StepsDone(growth));
  }
  return rc;
}

int Main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fault_rank mpi|ucx|auto kill|late|soak|steps, or fault_rank inproc steps [NP]\n");
    return 2;
  }
  const std::string backend = argv[1], scenario = argv[2];
  if (backend == "inproc") {
    const int np = argc > 3 ? std::atoi(argv[3]) : 2;
    if (scenario != "steps" || np < 1 || np > 64) return Fail(-1, "fault_rank inproc runs steps, 1 to 64 ranks");
    return InProcessSteps(np);
  }
  const Backend b = backend == "mpi" ? Backend::kMpi : backend == "ucx" ? Backend::kUcx : Backend::kAuto;
  if (b == Backend::kAuto && backend != "auto") return Fail(-1, "unknown backend " + backend);
  if (b != Backend::kAuto && FindBackend(b) == nullptr) {
    std::printf("fault_rank: SKIP the %s backend is not built\n", backend.c_str());
    return 77;
  }
  CommOptions options;  // timeout from WEFT_TIMEOUT_MS
  absl::StatusOr<std::unique_ptr<Communicator>> comm = InitWorld(b, options);
  if (!comm.ok()) return Fail(-1, "no world: " + comm.status().ToString());
  if ((*comm)->size() < 2) return Fail((*comm)->rank(), "needs 2 ranks or more");
  if (scenario == "kill") return Kill(std::move(*comm));
  if (scenario == "late") return Late(std::move(*comm));
  if (scenario == "soak") return Soak(std::move(*comm));
  if (scenario == "steps") return Steps(std::move(*comm));
  return Fail((*comm)->rank(), "unknown scenario " + scenario);
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) { return weft::Main(argc, argv); }
