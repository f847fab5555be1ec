// One rank's side of a weft-check run: its world communicator, who it is
// (node, device), and the two ways it calls weft. Call runs one weft call
// under the heartbeat, numbered by a sequence every rank counts alike, so
// that after a hang the numbers say who never joined. Gather moves the
// ranks' results to each other robustly: weft-check's own bookkeeping must
// survive the faults it looks for, so it uses only all-gathers (which
// WEFT_FAULT=corrupt leaves alone) of three copies, voted byte by byte
// (which outvotes flip's one element per call).
#ifndef WEFT_BENCH_CHECK_RANK_H_
#define WEFT_BENCH_CHECK_RANK_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/check/beat_channel.h"
#include "bench/check/heartbeat.h"
#include "bench/check/options.h"
#include "weft/weft.h"

namespace weft_check {

struct Identity {
  int rank = 0;
  std::string node;
  std::string device;  // "cpu" for host memory, "cuda:N" for a device
  int cores = 0;       // its node's hardware threads
};

class Rank {
 public:
  Rank(weftComm_t world, int rank, int nranks, const Options& o) : world_(world), rank_(rank), nranks_(nranks), o_(o) {}

  weftComm_t world() const { return world_; }
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const Options& options() const { return o_; }
  const Identity& me() const { return me_; }
  Heartbeat* heartbeat() const { return hb_.get(); }
  long long seq() const { return seq_; }

  // Learns this rank's node and device, gathers everyone's identity,
  // agrees on where the heartbeat goes (rank 0's choice: --heartbeat DIR, a
  // directory under /tmp on one node, rank 0's TCP listener across nodes)
  // and starts it. `made_dir`: set on rank 0 when it made the directory.
  absl::Status Start(bool* made_dir);
  const std::vector<Identity>& everyone() const { return everyone_; }
  const std::string& heartbeat_dir() const { return dir_; }  // empty over TCP
  const std::string& heartbeat_channel() const { return channel_; }  // the directory, or "tcp:..."
  // Every rank's last beat: rank 0 after a failure (over TCP, rank 0 only).
  std::vector<Beat> Beats() const;
  // Whether some node runs more ranks than it has cores. Ranks timed side
  // by side there would measure the scheduler, not the ranks, so timed
  // groups take turns instead.
  bool oversubscribed() const { return oversubscribed_; }

  // One weft call, under the heartbeat; its error names `what`.
  absl::Status Call(const std::string& what, const std::function<weftResult_t()>& call);
  // Counts `n` calls this rank sits out, so that sequence numbers stay
  // aligned with the ranks that make them.
  void Skip(long long n) { seq_ += n; }

  // Every rank of `comm` (size `n`)'s `mine`, in rank order; collective.
  absl::StatusOr<std::vector<std::string>> Gather(weftComm_t comm, int n, const std::string& mine,
                                                  const std::string& what);
  absl::StatusOr<std::vector<std::string>> Gather(const std::string& mine, const std::string& what) {
    return Gather(world_, nranks_, mine, what);
  }

  void StopHeartbeat() { hb_.reset(); }

 private:
  weftComm_t world_;
  int rank_, nranks_;
  const Options& o_;
  Identity me_;
  std::vector<Identity> everyone_;
  std::string dir_, channel_;
  std::unique_ptr<BeatServer> server_;  // rank 0, across nodes
  bool oversubscribed_ = false;
  std::unique_ptr<Heartbeat> hb_;
  long long seq_ = 0;
};

// weft's error for `r`: the call's name, the code's name, the last error.
absl::Status WeftError(const std::string& what, weftResult_t r);

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_RANK_H_
