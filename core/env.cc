#include "core/env.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace weft {
namespace {

// Parses an integer variable in [min, max]; warns and keeps `fallback` on
// junk, saying what is used instead.
long long ReadInt(const char* name, long long fallback, long long max, long long min = 0) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < min || x > max) {
    std::fprintf(stderr, "weft WARN: ignoring %s=%s (expected an integer in [%lld, %lld]); using %lld\n", name, v,
                 min, max, fallback);
    return fallback;
  }
  return x;
}

}  // namespace

const char* Name(WaitPolicy w) {
  switch (w) {
    case WaitPolicy::kDefault: return "default";
    case WaitPolicy::kSpin: return "spin";
    case WaitPolicy::kYield: return "yield";
    case WaitPolicy::kBlock: return "block";
  }
  return "invalid";
}

Env Env::Parse() {
  Env e;
  if (const char* d = std::getenv("WEFT_DEBUG")) {
    if (strcasecmp(d, "INFO") == 0) e.log_level = LogLevel::kInfo;
    else if (strcasecmp(d, "TRACE") == 0) e.log_level = LogLevel::kTrace;
    else if (strcasecmp(d, "WARN") != 0 && *d != '\0')
      std::fprintf(stderr, "weft WARN: ignoring WEFT_DEBUG=%s (expected WARN, INFO or TRACE)\n", d);
  }
  // 0 is no timeout to wait for: refused like junk, so it cannot silently mean the default.
  e.timeout_ms = static_cast<int>(ReadInt("WEFT_TIMEOUT_MS", e.timeout_ms, 1LL << 30, 1));
  e.segment_bytes = static_cast<size_t>(ReadInt("WEFT_SEGMENT_BYTES", 0, 1LL << 40));
  e.num_threads = static_cast<int>(ReadInt("WEFT_NUM_THREADS", 0, 1024));
  e.shm = ReadInt("WEFT_SHM", 1, 1) != 0;
  e.check_calls = ReadInt("WEFT_CHECK_CALLS", 1, 1) != 0;
  e.hang_warn_ms = static_cast<int>(ReadInt("WEFT_HANG_WARN_MS", e.hang_warn_ms, 1LL << 30));
  e.unreachable_ms = static_cast<int>(ReadInt("WEFT_UNREACHABLE_MS", e.unreachable_ms, 1LL << 30));
  e.hang_watch = ReadInt("WEFT_HANG_WATCH", 1, 1) != 0;
  e.bootstrap_timeout_ms = static_cast<int>(ReadInt("WEFT_BOOTSTRAP_TIMEOUT_MS", e.bootstrap_timeout_ms, 1LL << 30));
  if (e.bootstrap_timeout_ms == 0) {
    std::fprintf(stderr, "weft WARN: ignoring WEFT_BOOTSTRAP_TIMEOUT_MS=0 (a bootstrap must end; using %d)\n",
                 Env{}.bootstrap_timeout_ms);
    e.bootstrap_timeout_ms = Env{}.bootstrap_timeout_ms;
  }
  if (const char* v = std::getenv("WEFT_SOCKET_IFNAME")) e.socket_ifname = v;
  if (const char* f = std::getenv("WEFT_SOCKET_FAMILY"); f != nullptr && *f != '\0') {
    if (strcasecmp(f, "AF_INET") == 0) e.socket_family = AF_INET;
    else if (strcasecmp(f, "AF_INET6") == 0) e.socket_family = AF_INET6;
    else std::fprintf(stderr, "weft WARN: ignoring WEFT_SOCKET_FAMILY=%s (expected AF_INET or AF_INET6)\n", f);
  }
  if (const char* v = std::getenv("WEFT_TRACE")) e.trace_dir = v;
  if (const char* v = std::getenv("WEFT_UCX_LIBRARY"); v != nullptr && *v != '\0') e.ucx_library = v;
  e.trace_events = static_cast<size_t>(ReadInt("WEFT_TRACE_EVENTS", static_cast<long long>(e.trace_events),
                                               1LL << 30, 64));
  if (const char* w = std::getenv("WEFT_WAIT"); w != nullptr && *w != '\0') {
    if (strcasecmp(w, "spin") == 0) e.wait = WaitPolicy::kSpin;
    else if (strcasecmp(w, "yield") == 0) e.wait = WaitPolicy::kYield;
    else if (strcasecmp(w, "block") == 0) e.wait = WaitPolicy::kBlock;
    else std::fprintf(stderr, "weft WARN: ignoring WEFT_WAIT=%s (expected spin, yield or block); using the default\n", w);
  }
  return e;
}

const Env& Env::Get() {
  static const Env env = [] {
    Env e = Parse();
    if (e.log_level >= LogLevel::kInfo) {
      std::fprintf(stderr,
                   "weft INFO: pid %d env: WEFT_TIMEOUT_MS=%d WEFT_SEGMENT_BYTES=%zu WEFT_NUM_THREADS=%d "
                   "WEFT_SHM=%d WEFT_CHECK_CALLS=%d WEFT_HANG_WARN_MS=%d WEFT_UNREACHABLE_MS=%d WEFT_HANG_WATCH=%d "
                   "WEFT_BOOTSTRAP_TIMEOUT_MS=%d "
                   "WEFT_SOCKET_IFNAME=%s WEFT_WAIT=%s\n",
                   static_cast<int>(getpid()), e.timeout_ms, e.segment_bytes, e.num_threads, e.shm ? 1 : 0,
                   e.check_calls ? 1 : 0, e.hang_warn_ms, e.unreachable_ms, e.hang_watch ? 1 : 0, e.bootstrap_timeout_ms, e.socket_ifname.c_str(),
                   Name(e.wait));
    }
    return e;
  }();
  return env;
}

void LogLine(LogLevel level, const std::string& line) {
  static std::mutex mu;
  static const char* const kNames[] = {"WARN", "INFO", "TRACE"};
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "weft %s: %s\n", kNames[static_cast<int>(level)], line.c_str());
}

}  // namespace weft
