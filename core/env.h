// weft's settings from the environment, read once per process (mscclpp's Env).
//
//   WEFT_DEBUG          WARN (default), INFO or TRACE: what weft logs to stderr
//   WEFT_TIMEOUT_MS     how long a host collective waits for peers, >= 1 (600000;
//                       0 or junk is warned about and ignored)
//   WEFT_SEGMENT_BYTES  pipelining segment of the host backends (0: backend's choice)
//   WEFT_NUM_THREADS    host kernel thread pool size (0: hardware threads, at most 8)
//   WEFT_SHM            1 (default): host ranks that share a node move data
//                       through shared memory; 0: point-to-point only
//   WEFT_CHECK_CALLS    1 (default): the MPI and UCX backends check before each
//                       collective that every rank called the same one (kind,
//                       dtype, count, op, root) and fail on every rank if not;
//                       0: unchecked, which is unsafe: ranks that disagree may
//                       get wrong elements or wait out the timeout. Must be the
//                       same on every rank.
//   WEFT_HIER           which collectives of a multi-node MPI or UCX world go
//                       hierarchical (comm/p2p/topology.h): auto (default),
//                       on, off, or all_reduce=1M,broadcast=off,piece=4M,...
//                       (piece: all_reduce's pipeline pieces); read
//                       when a communicator is made, a bad value fails it.
//                       Must be the same on every rank.
//   WEFT_HANG_WARN_MS   after how long a waiting host collective logs a hang
//                       report (which ranks have not arrived, and what each
//                       called last), 60000; 0: no warning. Only below the
//                       timeout; the timeout's error carries the same report.
//   WEFT_UNREACHABLE_MS how long a waiting MPI or UCX rank lets a peer's host
//                       go without answering a TCP handshake on the hang-report
//                       channel before it fails the call naming that node and
//                       its ranks (a link down, a node crashed or frozen),
//                       20000; 0: never (such a host is found at the timeout).
//   WEFT_HANG_WATCH     1 (default); 0 turns the hang watch off, which is
//                       unsafe: no hang report, dead and unreachable peers found
//                       only at the timeout. For measuring its cost.
//   WEFT_BOOTSTRAP_TIMEOUT_MS  how long forming a world may take (300000)
//   WEFT_SOCKET_IFNAME  the interfaces the bootstrap root may listen on, as
//                       NCCL_SOCKET_IFNAME: "eth,ib" prefixes, "^docker"
//                       excluded, "=eth0" exact (default: see comm/bootstrap)
//   WEFT_SOCKET_FAMILY  AF_INET or AF_INET6: only that address family
//   WEFT_TRACE          a directory: write a Chrome trace-event timeline per
//                       rank there (core/trace.h); unset: no tracing
//   WEFT_TRACE_EVENTS   events a rank holds in memory before it appends them
//                       to its trace file, >= 64 (100000)
//   WEFT_FAULT          fault injection for testing (comm/fault.h); unset: none
//   WEFT_WAIT           how the MPI and UCX backends wait for peers: block
//                       (a short spin, then sleep), yield or spin (see
//                       WaitPolicy); unset: block, or yield on a node with
//                       more ranks than cores
//   WEFT_UCX_LIBRARY    the libucp the UCX backend loads when it is first
//                       used (comm/ucx/ucp_api.h); unset: libucp.so.0 from
//                       the dynamic loader's search path
//
// Explicit settings (weftConfig_t fields) win over these.
#ifndef WEFT_CORE_ENV_H_
#define WEFT_CORE_ENV_H_

#include <cstddef>
#include <string>

#include "absl/strings/str_format.h"

namespace weft {

enum class LogLevel : int { kWarn = 0, kInfo = 1, kTrace = 2 };

// How a host engine waits for its peers (values equal weftWaitPolicy_t).
//   kSpin:  poll without pause: the least latency, a core kept busy for as
//           long as the wait lasts (ranks with cores of their own, nothing
//           else to run).
//   kYield: poll, then sched_yield for a few ms, then short sleeps: little
//           latency when ranks share cores with each other only.
//   kBlock: poll for a few tens of us, then sleep until woken (shared-memory
//           barriers: a futex the peer wakes) or in short naps (engines that
//           cannot be woken): the core goes to whatever else the process
//           runs, such as a training step's backward on the same cores.
// kDefault resolves to WEFT_WAIT, else to kBlock, or kYield where a node
// holds more ranks than cores (sleeping there costs a time slice a wake).
enum class WaitPolicy : int { kDefault = 0, kSpin = 1, kYield = 2, kBlock = 3 };
inline constexpr int kNumWaitPolicies = 4;
const char* Name(WaitPolicy w);

struct Env {
  LogLevel log_level = LogLevel::kWarn;
  int timeout_ms = 600000;
  size_t segment_bytes = 0;
  int num_threads = 0;
  bool shm = true;
  bool check_calls = true;
  int hang_warn_ms = 60000;
  int unreachable_ms = 20000;
  bool hang_watch = true;
  int bootstrap_timeout_ms = 300000;
  std::string socket_ifname;
  int socket_family = 0;  // 0: any; else AF_INET or AF_INET6
  std::string trace_dir;   // empty: no tracing
  size_t trace_events = 100000;
  WaitPolicy wait = WaitPolicy::kDefault;  // kDefault: WEFT_WAIT unset
  std::string ucx_library = "libucp.so.0";

  // Parsed on first use; logged at INFO. Bad values are warned about and ignored.
  static const Env& Get();
  // The environment as it is now, uncached (Get parses it once); for tests.
  static Env Parse();
};

void LogLine(LogLevel level, const std::string& line);

template <typename... Args>
void Log(LogLevel level, const absl::FormatSpec<Args...>& f, const Args&... a) {
  if (static_cast<int>(level) <= static_cast<int>(Env::Get().log_level)) LogLine(level, absl::StrFormat(f, a...));
}

}  // namespace weft

#endif  // WEFT_CORE_ENV_H_
