#include "comm/bootstrap/mpi_runtime.h"

#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "comm/p2p/peer_loss.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace mpi {
namespace {

std::mutex g_init_mu;
bool g_ready = false;  // EnsureInitialized succeeded once (guarded by g_init_mu)
std::atomic<bool> g_needs_lock{false};

// Never destroyed: weft's MPI calls may run from atexit handlers and static
// destructors, after function-local statics could have gone.
std::mutex& CallMutex() {
  static auto* m = new std::mutex();
  return *m;
}

// Registered only when weft called MPI_Init_thread. The application may
// still have finalised MPI itself (it is allowed to), so check first.
void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Open MPI's MPI_Finalize waits for every process of the job (a PMIx
  // fence), a dead one too: after a peer died it never returns, and the
  // survivor that reported the death would hang at exit instead of exiting.
  if (p2p::PeerLost()) {
    Log(LogLevel::kWarn, "mpi: not calling MPI_Finalize at exit: a rank of this job has died, and MPI cannot "
        "finalise without it");
    return;
  }
  MPI_Finalize();
}

const char* ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

}  // namespace

std::string ErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

absl::Status EnsureInitialized() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return InvalidUsage("MPI was already finalized in this process and cannot be initialised again: create weft's "
                        "MPI communicators before MPI_Finalize (or let weft finalise MPI at exit)");
  }
  if (g_ready) return absl::OkStatus();

  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    MPI_Query_thread(&provided);
    Log(LogLevel::kInfo, "mpi: using the application's MPI (%s)", ThreadLevelName(provided));
  } else {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return SystemError("MPI_Init_thread failed: %s", ErrorString(rc));
    if (std::atexit(&FinalizeAtExit) != 0) {
      Log(LogLevel::kWarn, "mpi: could not register MPI_Finalize at exit; the application must call it");
    }
    Log(LogLevel::kInfo, "mpi: initialised MPI (%s); weft finalises it at exit", ThreadLevelName(provided));
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    g_needs_lock.store(true, std::memory_order_release);
    Log(LogLevel::kWarn, "mpi: MPI runs at %s, below MPI_THREAD_MULTIPLE; weft serialises its own MPI calls, "
        "and the application must not call MPI while weft host streams run", ThreadLevelName(provided));
  }
  g_ready = true;
  return absl::OkStatus();
}

bool Active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

bool Oversubscribed() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                           "SLURM_NTASKS_PER_NODE"}) {
    const char* v = std::getenv(name);
    int local = 0;
    if (v != nullptr && absl::SimpleAtoi(v, &local) && local > 0) {
      return static_cast<unsigned>(local) > std::thread::hardware_concurrency();
    }
  }
  return true;
}

bool NeedsCallLock() { return g_needs_lock.load(std::memory_order_acquire); }

CallLock::CallLock() : locked_(NeedsCallLock()) {
  if (locked_) CallMutex().lock();
}

CallLock::~CallLock() {
  if (locked_) CallMutex().unlock();
}

}  // namespace mpi
}  // namespace weft
