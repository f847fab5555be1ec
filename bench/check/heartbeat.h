// weft-check's out-of-band progress record, independent of weft's own
// collectives so that it still speaks when they hang: each rank keeps a
// small file in a directory every rank can reach (one node: /tmp; several:
// a shared filesystem, --heartbeat DIR), or, on several nodes without
// --heartbeat, sends it to rank 0 over TCP (beat_channel.h), rewritten by a
// thread of its own every few tens of milliseconds with the calls it has
// entered and completed. After a hang rank 0 reads them all: a rank that
// never entered the hung call never joined it.
//
//   ASSIGN_OR_RETURN(auto hb, Heartbeat::Start(dir, rank, node, device));
//   hb->Enter(seq, "all_reduce 4096 B #2");  ... the call ...  hb->Complete(seq);
//   std::vector<Beat> beats = ReadBeats(dir, nranks);  // rank 0, after a failure
#ifndef WEFT_BENCH_CHECK_HEARTBEAT_H_
#define WEFT_BENCH_CHECK_HEARTBEAT_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace weft_check {

// What one rank's file says.
struct Beat {
  bool found = false;
  int rank = -1;
  std::string node, device;
  long long entered = -1;    // the sequence number of the last call it entered
  long long completed = -1;  // ... and of the last it completed
  std::string current;       // the call it is in, or empty
  std::string last;          // the last call it completed, or empty
  std::string state;         // "running", "done" or "failed: <why>"
};

class BeatLink;

class Heartbeat {
 public:
  static constexpr int kPeriodMs = 20;
  static absl::StatusOr<std::unique_ptr<Heartbeat>> Start(const std::string& dir, int rank, const std::string& node,
                                                          const std::string& device);
  // The same, sent over `link` to rank 0's BeatServer instead of a file.
  static absl::StatusOr<std::unique_ptr<Heartbeat>> Start(std::unique_ptr<BeatLink> link, int rank,
                                                          const std::string& node, const std::string& device);
  ~Heartbeat();  // writes the final state, removes nothing
  void Enter(long long seq, const std::string& what);
  void Complete(long long seq);
  void SetState(const std::string& state);
  std::string path() const { return path_; }

 private:
  Heartbeat() = default;
  static std::unique_ptr<Heartbeat> Make(const std::string& path, std::unique_ptr<BeatLink> link, int rank,
                                         const std::string& node, const std::string& device);
  void Loop();
  void Write();

  std::string path_;
  std::unique_ptr<BeatLink> link_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool dirty_ = true;
  Beat beat_;
  std::thread thread_;
};

// Every rank's beat (found = false where its file is missing or unreadable).
std::vector<Beat> ReadBeats(const std::string& dir, int nranks);
// One beat line of rank `rank` into *b; false (and *b untouched) if it does not parse.
bool ParseBeat(const std::string& line, int rank, Beat* b);
std::string BeatPath(const std::string& dir, int rank);

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_HEARTBEAT_H_
