#include "comm/bootstrap/launch.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/bootstrap/net.h"
#include "comm/bootstrap/socket.h"
#include "comm/bootstrap/torch_store.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace bootstrap {
namespace {

const char* Get(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

absl::StatusOr<int> Int(const char* name, int lo, int hi) {
  const char* v = Get(name);
  int x = 0;
  if (v == nullptr) return InvalidArgument("%s is not set", name);
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
    return InvalidArgument("%s=%s is not an integer in [%d, %d]", name, v, lo, hi);
  }
  return x;
}

// FNV-1a over the strings that every rank of one launch sees alike.
uint64_t Tag(std::initializer_list<std::string> parts) {
  uint64_t h = 1469598103934665603ull;
  for (const std::string& p : parts) {
    for (unsigned char c : p + '\x1f') h = (h ^ c) * 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

// "host:port", "[v6]:port" or "v6-literal" is not allowed without brackets.
absl::Status SplitHostPort(const char* name, const std::string& v, std::string* host, int* port) {
  const size_t colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == v.size()) {
    return InvalidArgument("%s=%s is not host:port", name, v);
  }
  *host = v.substr(0, colon);
  if (host->find(':') != std::string::npos && host->front() != '[') {
    return InvalidArgument("%s=%s: write an IPv6 address in brackets, [addr]:port", name, v);
  }
  if (!absl::SimpleAtoi(v.substr(colon + 1), port) || *port < 1 || *port > 65535) {
    return InvalidArgument("%s=%s: the port is not in 1..65535", name, v);
  }
  return absl::OkStatus();
}

// WEFT_MASTER_PORT, when set, is the bootstrap's port under every launcher.
absl::StatusOr<int> PortOverride() {
  if (Get("WEFT_MASTER_PORT") == nullptr) return 0;
  return Int("WEFT_MASTER_PORT", 1, 65535);
}

absl::StatusOr<Launch> Torchrun() {
  Launch l;
  l.kind = LaunchKind::kTorchrun;
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    if (Get(v) == nullptr) {
      return InvalidArgument("torchrun-style launch (RANK or WORLD_SIZE is set) without %s: set RANK, WORLD_SIZE, "
                             "MASTER_ADDR and MASTER_PORT together", v);
    }
  }
  ASSIGN_OR_RETURN(l.size, Int("WORLD_SIZE", 1, 1 << 24));
  ASSIGN_OR_RETURN(l.rank, Int("RANK", 0, 1 << 24));
  if (l.rank >= l.size) return InvalidArgument("RANK=%d is outside [0, WORLD_SIZE=%d)", l.rank, l.size);
  ASSIGN_OR_RETURN(const int master_port, Int("MASTER_PORT", 1, 65535));
  ASSIGN_OR_RETURN(l.root_port, PortOverride());
  l.root_host = Get("MASTER_ADDR");
  const std::string vars = absl::StrCat("torchrun variables: RANK=", l.rank, " WORLD_SIZE=", l.size,
                                        " MASTER_ADDR=", l.root_host, " MASTER_PORT=", master_port);
  const char* agent_store = Get("TORCHELASTIC_USE_AGENT_STORE");
  if (l.root_port == 0 && agent_store != nullptr && std::string(agent_store) == "True") {
    // torchrun's agent serves a store there for the whole job: no port of
    // weft's own is needed, so none can be taken.
    l.torch_store_port = master_port;
    l.why = absl::StrCat(vars, "; weft's bootstrap through torch's agent store (TORCHELASTIC_USE_AGENT_STORE=True)");
    return l;
  }
  if (l.root_port == 0) {
    // A store, if any, is rank 0's own process's, on MASTER_PORT: weft's
    // root takes the next.
    if (master_port == 65535) return InvalidArgument("MASTER_PORT=65535 leaves no port above it: set WEFT_MASTER_PORT");
    l.root_port = master_port + 1;
  }
  l.why = absl::StrCat(vars, "; weft's bootstrap on port ", l.root_port);
  return l;
}

absl::StatusOr<Launch> Slurm() {
  Launch l;
  l.kind = LaunchKind::kSlurm;
  ASSIGN_OR_RETURN(l.rank, Int("SLURM_PROCID", 0, 1 << 24));
  ASSIGN_OR_RETURN(l.size, Int(Get("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS", 1, 1 << 24));
  if (l.rank >= l.size) return InvalidArgument("SLURM_PROCID=%d is outside [0, %d tasks)", l.rank, l.size);
  const char* list = Get("SLURM_STEP_NODELIST") ? Get("SLURM_STEP_NODELIST") : Get("SLURM_NODELIST");
  if (list == nullptr) return InvalidArgument("a Slurm step (SLURM_PROCID is set) without SLURM_STEP_NODELIST");
  ASSIGN_OR_RETURN(l.root_host, FirstHost(list));
  ASSIGN_OR_RETURN(l.root_port, PortOverride());
  const std::string job = Get("SLURM_JOB_ID") ? Get("SLURM_JOB_ID") : "0";
  const std::string step = Get("SLURM_STEP_ID") ? Get("SLURM_STEP_ID") : "0";
  if (l.root_port == 0) {
    // Every task of the step derives the same port from the job and step,
    // in a range that Linux does not hand out as ephemeral ports.
    l.root_port = 20000 + static_cast<int>(Tag({job, step}) % 12000);
  }
  l.why = absl::StrCat("Slurm step variables: SLURM_PROCID=", l.rank, " tasks=", l.size, " first node ",
                       l.root_host, "; weft's bootstrap on port ", l.root_port);
  return l;
}

absl::StatusOr<Launch> WeftVariables() {
  Launch l;
  l.kind = LaunchKind::kWeft;
  for (const char* v : {"WEFT_RANK", "WEFT_WORLD_SIZE", "WEFT_ROOT"}) {
    if (Get(v) == nullptr) return InvalidArgument("WEFT_RANK, WEFT_WORLD_SIZE and WEFT_ROOT go together: %s is not set", v);
  }
  ASSIGN_OR_RETURN(l.size, Int("WEFT_WORLD_SIZE", 1, 1 << 24));
  ASSIGN_OR_RETURN(l.rank, Int("WEFT_RANK", 0, 1 << 24));
  if (l.rank >= l.size) return InvalidArgument("WEFT_RANK=%d is outside [0, WEFT_WORLD_SIZE=%d)", l.rank, l.size);
  RETURN_IF_ERROR(SplitHostPort("WEFT_ROOT", Get("WEFT_ROOT"), &l.root_host, &l.root_port));
  l.why = absl::StrCat("weft variables: WEFT_RANK=", l.rank, " WEFT_WORLD_SIZE=", l.size, " WEFT_ROOT=",
                       Get("WEFT_ROOT"));
  return l;
}

std::atomic<uint64_t> g_launched_worlds{0};

// Rank 0 makes a unique id (its root at an ephemeral port of
// ChooseListenAddress) and sets it under a key that only this world's ranks
// compute; the others wait for it. The key also counts the worlds made under
// one tag: a process that makes a world, exits, and is run again by the same
// worker (a script of several programs) gets the same tag, and must not read
// the id of a root that ended with the last one. Every rank of world g adds
// to the count before any rank can start world g + 1 (which needs world g
// formed), so count / size is the same on all of them. (A world that never
// formed leaves the count uneven; torchrun restarts its workers with a new
// TORCHELASTIC_RESTART_COUNT, which is a new tag.)
absl::StatusOr<std::unique_ptr<Bootstrap>> JoinThroughTorchStore(const Launch& l, uint64_t tag, int timeout_ms) {
  if (timeout_ms <= 0) timeout_ms = Env::Get().bootstrap_timeout_ms;
  const Deadline deadline = After(timeout_ms);
  const std::string prefix = absl::StrCat("weft/bootstrap/", absl::Hex(tag, absl::kZeroPad16));
  absl::StatusOr<TorchStore> store = TorchStore::Connect(l.root_host, l.torch_store_port, deadline);
  if (!store.ok()) return Annotate(store.status(), absl::StrCat("rank ", l.rank, " (", l.why, ")"));
  ASSIGN_OR_RETURN(const int64_t joined, store->Add(prefix + "/joined", 1, deadline));
  const std::string key = absl::StrCat(prefix, "/", (joined - 1) / l.size, "/id");
  UniqueId id;
  if (l.rank == 0) {
    ASSIGN_OR_RETURN(id, MakeUniqueId());
    unsigned char bytes[kUniqueIdBytes];
    EncodeUniqueId(id, bytes);
    RETURN_IF_ERROR(store->Set(key, std::string(reinterpret_cast<char*>(bytes), sizeof(bytes)), deadline));
  } else {
    absl::StatusOr<std::string> v = store->WaitGet(key, deadline);
    if (absl::IsDeadlineExceeded(v.status())) {
      return Timeout("rank %d: rank 0 did not publish weft's bootstrap root under %s in %s within %d ms (did rank 0 "
                     "fail, or not make this world?)", l.rank, key, store->where(), timeout_ms);
    }
    RETURN_IF_ERROR(v.status());
    if (v->size() != kUniqueIdBytes) {
      return SystemError("%s holds %d bytes under %s, not a unique id's %d", store->where(), v->size(), key,
                         kUniqueIdBytes);
    }
    ASSIGN_OR_RETURN(id, DecodeUniqueId(reinterpret_cast<const unsigned char*>(v->data())));
  }
  Log(LogLevel::kInfo, "bootstrap: rank %d found the root at %s through %s", l.rank, id.root.ToString(),
      store->where());
  return JoinSocketWorld(id, l.size, l.rank, timeout_ms);
}
std::atomic<const MpiHooks*> g_mpi{nullptr};

}  // namespace

const char* Name(LaunchKind k) {
  switch (k) {
    case LaunchKind::kNone: return "none";
    case LaunchKind::kMpi: return "MPI";
    case LaunchKind::kTorchrun: return "torchrun";
    case LaunchKind::kSlurm: return "Slurm";
    case LaunchKind::kWeft: return "weft";
  }
  return "?";
}

bool RegisterMpi(const MpiHooks& hooks) {
  g_mpi.store(new MpiHooks(hooks));  // once, at load time; never freed
  return true;
}

const MpiHooks* Mpi() { return g_mpi.load(); }

bool SlurmStep() {
  // An sbatch script also sees SLURM_PROCID and SLURM_NTASKS; only a task of
  // a job step (srun) has SLURM_STEP_NUM_TASKS.
  int n = 0;
  const char* v = Get("SLURM_STEP_NUM_TASKS");
  return Get("SLURM_PROCID") != nullptr && v != nullptr && absl::SimpleAtoi(v, &n) && n > 1;
}

bool MpiLauncherVariables() {
  // srun sets PMI_* or PMIX_* only with --mpi=pmi2/pmix, when MPI can wire
  // itself up; a plain srun step has Slurm's variables alone, and MPI_Init
  // there would make one-rank worlds.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
                        "MV2_COMM_WORLD_SIZE"}) {
    if (Get(v) != nullptr) return true;
  }
  return false;
}

absl::StatusOr<Launch> FindLaunch(bool mpi_built) {
  if (MpiLauncherVariables()) {
    if (mpi_built) {
      Launch l;
      l.kind = LaunchKind::kMpi;
      l.why = "an MPI launcher's variables (mpirun, mpiexec, srun or PMI)";
      return l;
    }
    // Without MPI an srun step still has Slurm's variables to go by.
    if (!SlurmStep()) {
      return Unsupported("this process was started by an MPI launcher (%s is set), but this libweft was built "
                         "without MPI: rebuild with -Dmpi=enabled, or launch with torchrun, srun or WEFT_RANK / "
                         "WEFT_WORLD_SIZE / WEFT_ROOT",
                         Get("OMPI_COMM_WORLD_SIZE") ? "OMPI_COMM_WORLD_SIZE"
                         : Get("PMIX_RANK")          ? "PMIX_RANK"
                         : Get("PMI_SIZE")           ? "PMI_SIZE"
                         : Get("PMI_RANK")           ? "PMI_RANK"
                         : Get("MPI_LOCALNRANKS")    ? "MPI_LOCALNRANKS"
                                                     : "MV2_COMM_WORLD_SIZE");
    }
  }
  if (Get("RANK") != nullptr || Get("WORLD_SIZE") != nullptr) return Torchrun();
  if (SlurmStep()) return Slurm();
  if (Get("WEFT_RANK") != nullptr || Get("WEFT_WORLD_SIZE") != nullptr || Get("WEFT_ROOT") != nullptr) {
    return WeftVariables();
  }
  Launch l;
  l.why = "no launcher's variables (MPI, torchrun, Slurm, WEFT_RANK) are set";
  return l;
}

absl::StatusOr<std::unique_ptr<Bootstrap>> JoinLaunchedWorld(const Launch& l, int timeout_ms) {
  if (l.size == 1) return Self();
  const uint64_t world = g_launched_worlds.fetch_add(1);
  auto env = [](const char* v) { return std::string(Get(v) ? Get(v) : ""); };
  // Every rank of one launch computes the same tag; a restart (torchelastic)
  // or another step (Slurm) gets another.
  const uint64_t tag = Tag({Name(l.kind), l.root_host, std::to_string(l.root_port),
                            std::to_string(l.torch_store_port), std::to_string(l.size),
                            env("TORCHELASTIC_RUN_ID"), env("TORCHELASTIC_RESTART_COUNT"), env("SLURM_JOB_ID"),
                            env("SLURM_STEP_ID"), env("WEFT_JOB_ID"), std::to_string(world)});
  if (l.torch_store_port != 0) return JoinThroughTorchStore(l, tag, timeout_ms);
  absl::StatusOr<Endpoint> root = Resolve(l.root_host, l.root_port);
  if (!root.ok()) return Annotate(root.status(), absl::StrCat("the bootstrap root of a ", Name(l.kind), " launch"));
  UniqueId id{*root, tag};
  if (l.rank == 0) {
    absl::Status s = ServeRoot(*root, tag);
    if (!s.ok()) {
      return Annotate(s, absl::StrCat("rank 0 serving weft's bootstrap (", l.why,
                                      "; WEFT_MASTER_PORT picks another port)"));
    }
  }
  return JoinSocketWorld(id, l.size, l.rank, timeout_ms);
}

absl::StatusOr<std::string> FirstHost(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == ',' && depth == 0) break;
    if (c == '[') ++depth;
    if (c == ']') --depth;
    first += c;
  }
  const size_t open = first.find('[');
  if (open == std::string::npos) {
    if (first.empty()) return InvalidArgument("SLURM_STEP_NODELIST=%s names no host", nodelist);
    return first;
  }
  const size_t close = first.find(']', open);
  if (close == std::string::npos) return InvalidArgument("SLURM_STEP_NODELIST=%s: unbalanced '['", nodelist);
  // The first range's first number, zero padding kept: "01-04,07" -> "01".
  std::string range = first.substr(open + 1, close - open - 1);
  const size_t end = range.find_first_of(",-");
  const std::string num = range.substr(0, end);
  if (num.empty()) return InvalidArgument("SLURM_STEP_NODELIST=%s: an empty range", nodelist);
  return first.substr(0, open) + num + first.substr(close + 1);
}

}  // namespace bootstrap
}  // namespace weft
