#include "core/trace.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "core/env.h"

namespace weft::trace {
namespace internal {

bool g_on = !Env::Get().trace_dir.empty();

Call& PendingCall() {
  thread_local Call call;
  return call;
}

std::string& PendingLabel() {
  thread_local std::string label;
  return label;
}

}  // namespace internal
namespace {

thread_local const char* t_thread_name = nullptr;

int ThisTid() {
  thread_local const int tid = static_cast<int>(syscall(SYS_gettid));
  return tid;
}

// The k-th world of `rank` in this process (in-process tests make many).
int NextWorldOfRank(int rank) {
  static std::mutex mu;
  static std::map<int, int> seen;
  std::lock_guard<std::mutex> lock(mu);
  return seen[rank]++;
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "unknown";
  return host;
}

// Live sinks, closed at exit() (leaked: exit handlers run while statics are destroyed).
std::mutex& LiveMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::vector<Sink*>& Live() {
  static auto* live = new std::vector<Sink*>;
  return *live;
}
void CloseLive() {
  std::lock_guard<std::mutex> lock(LiveMu());
  for (Sink* s : Live()) s->Close();
}

}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void NameThisThread(const char* name) { t_thread_name = name; }

Call TakeCall() { return std::exchange(internal::PendingCall(), Call{}); }

const std::string& CurrentLabel() { return internal::PendingLabel(); }

std::string Escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out;
}

Sink::Sink(const std::string& dir, size_t capacity, int rank, int size, const char* backend)
    : rank_(rank), capacity_(std::max<size_t>(capacity, 64)) {
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "weft WARN: WEFT_TRACE=%s: cannot create the directory (%s); rank %d records no trace\n",
                 dir.c_str(), std::strerror(errno), rank);
    return;
  }
  const std::string host = HostName();
  const int k = NextWorldOfRank(rank);
  path_ = absl::StrFormat("%s/weft-trace.rank%d.%s.%d%s.json", dir, rank, host, static_cast<int>(getpid()),
                          k == 0 ? std::string() : absl::StrFormat(".%d", k));
  header_ = absl::StrFormat(
      "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d (%s, pid %d)\"}},\n"
      "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n"
      "{\"name\":\"weft_world\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"rank\":%d,\"size\":%d,"
      "\"backend\":\"%s\",\"host\":\"%s\",\"os_pid\":%d}}",
      rank, rank, Escape(host), static_cast<int>(getpid()), rank, rank, rank, rank, size, backend, Escape(host),
      static_cast<int>(getpid()));
  events_.reserve(capacity_);
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(CloseLive); });
  std::lock_guard<std::mutex> lock(LiveMu());
  Live().push_back(this);
}

Sink::~Sink() {
  {
    std::lock_guard<std::mutex> lock(LiveMu());
    Live().erase(std::remove(Live().begin(), Live().end(), this), Live().end());
  }
  Close();
}

void Sink::Close() {
  std::vector<Event> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    rest.swap(events_);
  }
  Write(rest, true);
}

std::shared_ptr<Sink> Sink::FromEnv(int rank, int size, const char* backend) {
  if (!On()) return nullptr;
  const Env& env = Env::Get();
  return std::make_shared<Sink>(env.trace_dir, env.trace_events, rank, size, backend);
}

void Sink::SetClock(int64_t offset_ns, int64_t rtt_ns, int rounds, const char* method) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    offset_ns_ = offset_ns;
  }
  Add(Event{0, 0, 0, 0, 'M', "weft_clock", "",
            absl::StrFormat("\"offset_us\":%.3f,\"rtt_us\":%.3f,\"rounds\":%d,\"method\":\"%s\"", offset_ns / 1e3,
                            rtt_ns / 1e3, rounds, method)});
}

void Sink::Complete(const char* name, const char* cat, int64_t begin_ns, int64_t end_ns, std::string args) {
  Add(Event{begin_ns, std::max<int64_t>(end_ns - begin_ns, 0), 0, ThisTid(), 'X', name, cat, std::move(args)});
}

void Sink::Instant(const char* name, const char* cat, std::string args) {
  Add(Event{NowNs(), 0, 0, ThisTid(), 'i', name, cat, std::move(args)});
}

void Sink::Async(const char* name, const char* cat, int64_t begin_ns, int64_t end_ns, std::string args) {
  Add(Event{begin_ns, std::max<int64_t>(end_ns - begin_ns, 0), 0, ThisTid(), 'b', name, cat, std::move(args)});
}

void Sink::Add(Event e) {
  if (path_.empty()) return;
  std::vector<Event> full;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    if (e.ph == 'b') e.id = next_id_++;
    // A thread's name goes in once per sink, before its first event.
    if (e.ph != 'M' && t_thread_name != nullptr &&
        std::find(named_tids_.begin(), named_tids_.end(), e.tid) == named_tids_.end()) {
      named_tids_.push_back(e.tid);
      events_.push_back(Event{0, 0, 0, e.tid, 'M', "thread_name", "",
                              absl::StrFormat("\"name\":\"%s\"", Escape(t_thread_name))});
    }
    events_.push_back(std::move(e));
    if (events_.size() < capacity_) return;
    full.reserve(capacity_);
    full.swap(events_);
    // The file lock is taken before the buffer's is let go, so buffers
    // reach the file in the order they filled.
    file_mu_.lock();
  }
  std::lock_guard<std::mutex> file_lock(file_mu_, std::adopt_lock);
  Write(full, false);
}

void Sink::Write(const std::vector<Event>& events, bool last) {
  if (path_.empty()) return;
  std::unique_lock<std::mutex> lock(file_mu_, std::defer_lock);
  if (last) lock.lock();  // otherwise Add holds it
  if (file_ == nullptr && !first_written_) {
    file_ = std::fopen(path_.c_str(), "w");
    if (file_ == nullptr) {
      std::fprintf(stderr, "weft WARN: WEFT_TRACE: cannot write %s (%s); rank %d's trace is lost\n", path_.c_str(),
                   std::strerror(errno), rank_);
      first_written_ = true;
      return;
    }
    std::fprintf(file_, "[\n%s", header_.c_str());
    first_written_ = true;
  }
  if (file_ == nullptr) return;
  int64_t offset;
  {
    std::lock_guard<std::mutex> buf_lock(mu_);
    offset = offset_ns_;
  }
  const auto us = [offset](int64_t ns) { return static_cast<double>(ns - offset) / 1e3; };
  for (const Event& e : events) {
    if (e.ph == 'M') {
      std::fprintf(file_, ",\n{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{%s}}", e.name, rank_,
                   e.tid, e.args.c_str());
      continue;
    }
    const char* args = e.args.c_str();
    if (e.ph == 'X') {
      std::fprintf(file_, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
                   "\"tid\":%d,\"args\":{%s}}", e.name, e.cat, us(e.ts_ns), e.dur_ns / 1e3, rank_, e.tid, args);
    } else if (e.ph == 'i') {
      std::fprintf(file_, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,\"pid\":%d,"
                   "\"tid\":%d,\"args\":{%s}}", e.name, e.cat, us(e.ts_ns), rank_, e.tid, args);
    } else {  // an async pair
      std::fprintf(file_, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"b\",\"id\":%llu,\"ts\":%.3f,\"pid\":%d,"
                   "\"tid\":%d,\"args\":{%s}}", e.name, e.cat, static_cast<unsigned long long>(e.id), us(e.ts_ns),
                   rank_, e.tid, args);
      std::fprintf(file_, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"e\",\"id\":%llu,\"ts\":%.3f,\"pid\":%d,"
                   "\"tid\":%d}", e.name, e.cat, static_cast<unsigned long long>(e.id), us(e.ts_ns + e.dur_ns),
                   rank_, e.tid);
    }
  }
  if (last) {
    std::fprintf(file_, "\n]\n");
    std::fclose(file_);
    file_ = nullptr;
  } else {
    std::fflush(file_);
  }
}

}  // namespace weft::trace
