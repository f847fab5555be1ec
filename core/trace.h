// A timeline of what weft did: Chrome trace-event JSON, one file per rank.
//
// With WEFT_TRACE=DIR every world communicator's rank writes
// DIR/weft-trace.rank<R>.<host>.<pid>[.<k>].json (k counts that rank's
// earlier worlds in the process), which Perfetto and chrome://tracing open
// and tools/trace-merge joins into one view. pid in the file is the world
// rank, tid the thread that did the work. Without WEFT_TRACE nothing is
// recorded and each hook costs one load of a global flag.
//
//   trace::Sink* sink = comm.trace();            // nullptr when tracing is off
//   { trace::Span s(sink, "copy_in", "reducer"); s.Args("\"bucket\":%d", b); ... }
//
// Events are kept in a buffer of WEFT_TRACE_EVENTS (100000 by default); a
// full buffer is appended to the file and starts over empty, so memory stays
// bounded whatever the run's length (the file is not). The file is an array
// of events; its closing bracket is written when the last communicator
// holding the sink is destroyed, or at exit() for a process that never
// destroys its communicators (as many training scripts do), and a file cut
// short by a crash still opens (the trace-event format allows a missing
// bracket).
//
// Timestamps are the rank's steady clock minus its offset to rank 0's,
// measured at init (comm/trace_clock.h), in microseconds.
#ifndef WEFT_CORE_TRACE_H_
#define WEFT_CORE_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace weft::trace {

namespace internal {
extern bool g_on;  // set once at load from WEFT_TRACE
}  // namespace internal

// Whether this process records a timeline (WEFT_TRACE set).
inline bool On() { return internal::g_on; }

// Nanoseconds on this process's steady clock.
int64_t NowNs();

// Names the calling thread in every trace it records into (a host stream's
// worker, say); the name must outlive the thread.
void NameThisThread(const char* name);

class Sink {
 public:
  // A sink for world rank `rank` of `size`, writing into `dir` with room for
  // `capacity` events in memory. Errors (a directory that cannot be
  // written) are logged once and the sink records nothing.
  Sink(const std::string& dir, size_t capacity, int rank, int size, const char* backend);
  ~Sink();  // writes what is left and closes the file
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;

  // A sink from the environment (WEFT_TRACE, WEFT_TRACE_EVENTS), or
  // nullptr when tracing is off.
  static std::shared_ptr<Sink> FromEnv(int rank, int size, const char* backend);

  // This rank's clock minus rank 0's, by `method`; applied to every event
  // written from now on (the offset is set at init, before any is written).
  void SetClock(int64_t offset_ns, int64_t rtt_ns, int rounds, const char* method);

  // A span [begin, end) on the calling thread; `args` is the inside of a
  // JSON object ("\"bytes\":4096"), or empty. name and cat must be static.
  void Complete(const char* name, const char* cat, int64_t begin_ns, int64_t end_ns, std::string args);
  // A moment on the calling thread.
  void Instant(const char* name, const char* cat, std::string args);
  // A span that need not nest with the thread's others (a task's wait in a
  // host stream's queue, which overlaps the task before it): its own track.
  void Async(const char* name, const char* cat, int64_t begin_ns, int64_t end_ns, std::string args);

  const std::string& path() const { return path_; }
  int rank() const { return rank_; }
  // Writes what is buffered and closes the file; later events are dropped.
  // At exit() for every live sink, and by the destructor.
  void Close();

 private:
  struct Event {
    int64_t ts_ns;
    int64_t dur_ns;
    uint64_t id;  // async events
    int tid;
    char ph;
    const char* name;
    const char* cat;
    std::string args;
  };
  void Add(Event e);
  // Appends `events` to the file (opening it first, with the header).
  void Write(const std::vector<Event>& events, bool last);

  const int rank_;
  const size_t capacity_;
  std::string path_;  // empty: the directory failed, record nothing

  std::mutex mu_;  // the buffer
  std::vector<Event> events_;
  std::vector<int> named_tids_;
  uint64_t next_id_ = 1;
  int64_t offset_ns_ = 0;
  bool closed_ = false;

  std::mutex file_mu_;  // one write at a time, in buffer order
  std::FILE* file_ = nullptr;
  bool first_written_ = false;
  std::string header_;  // metadata written first
};

// A span of the calling thread, recorded when it ends; does nothing when
// `sink` is null.
class Span {
 public:
  Span(Sink* sink, const char* name, const char* cat)
      : sink_(sink), name_(name), cat_(cat), begin_(sink != nullptr ? NowNs() : 0) {}
  ~Span() {
    if (sink_ != nullptr) sink_->Complete(name_, cat_, begin_, NowNs(), std::move(args_));
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  template <typename... A>
  void Args(const absl::FormatSpec<A...>& f, const A&... a) {
    if (sink_ != nullptr) args_ = absl::StrFormat(f, a...);
  }

 private:
  Sink* const sink_;
  const char* const name_;
  const char* const cat_;
  const int64_t begin_;
  std::string args_;
};

// What a collective call was asked to do, noted by the communicator's
// public method just before it issues the call (same thread).
struct Call {
  bool set = false;
  size_t count = 0;
  int dtype = -1;  // DataType
  int op = -1;     // RedOp, -1: none
  int root = -1;   // root or peer, -1: none
  int tag = -1;    // a point-to-point call's tag, -1: none
};
namespace internal {
Call& PendingCall();
std::string& PendingLabel();
}  // namespace internal
inline void NoteCall(size_t count, int dtype, int op = -1, int root = -1, int tag = -1) {
  if (On()) internal::PendingCall() = Call{true, count, dtype, op, root, tag};
}
// The call noted on this thread, cleared.
Call TakeCall();

// A label that the collectives the calling thread issues while it lives
// carry ("bucket 2 segment 0"), so the timeline ties a collective to the
// reducer bucket or shard group it serves.
class Label {
 public:
  template <typename... A>
  explicit Label(const absl::FormatSpec<A...>& f, const A&... a) : on_(On()) {
    if (on_) internal::PendingLabel() = absl::StrFormat(f, a...);
  }
  ~Label() {
    if (on_) internal::PendingLabel().clear();
  }
  Label(const Label&) = delete;
  Label& operator=(const Label&) = delete;

 private:
  const bool on_;
};
// The calling thread's label ("" when none).
const std::string& CurrentLabel();

// A string as a JSON string's inside (quotes and control characters escaped).
std::string Escape(const std::string& s);

}  // namespace weft::trace

#endif  // WEFT_CORE_TRACE_H_
