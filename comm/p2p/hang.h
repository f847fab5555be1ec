// Hang diagnosis for the point-to-point backends (MPI, UCX): what a rank
// that waits too long in a collective can say about its peers, learned out of
// band, since the data path it waits on may be the thing that is stuck.
//
// Every rank publishes its progress as eight words (ProgressWords): how many
// collectives it has entered and completed on the communicator, and the
// fingerprint (check.h) of the last of each. Peers read those words through a
// Board: straight from the shared-memory control pages when every rank is on
// one node (shm.h), otherwise by asking each peer's process over a small TCP
// side channel (status_channel.h) that no collective traffic uses.
//
// A wait (backoff.h) that passes WEFT_HANG_WARN_MS logs the report once;
// the timeout's error is the same report. While it waits, a rank also probes
// whether its peers' processes still exist, so a dead peer is an error at
// once (RemoteError naming the rank and its node), not after the timeout.
//
//   HangWatch watch(rank, size);
//   watch.Enter(MakeCall(CallKind::kAllReduce, t, count, op));
//   ... wait with Patience{..., &watch} ...
//   watch.Done();
#ifndef WEFT_COMM_P2P_HANG_H_
#define WEFT_COMM_P2P_HANG_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "comm/p2p/check.h"

namespace weft {
namespace p2p {

// What a rank publishes, written by its collective's thread only. Words are
// read with atomic_ref, so the struct may live in a shared segment.
struct ProgressWords {
  uint64_t entered = 0;  // collectives begun; the current one is #entered
  uint64_t done = 0;     // collectives completed
  uint64_t entered_call[kCallWords] = {};
  uint64_t done_call[kCallWords] = {};
};
static_assert(sizeof(ProgressWords) == 64, "one cache line");

// A consistent copy of `w` (retried while its writer moves on).
ProgressWords ReadProgress(const ProgressWords& w);

// What a board knows about one peer.
struct PeerState {
  enum Kind { kKnown, kDead, kUnknown, kGone } kind = kUnknown;
  ProgressWords progress;
  std::string where;  // "pid 1234 on node h1"
  std::string why;    // for kDead, kUnknown, kGone: what the probe saw
};

// Where peers' progress is read. Called from several threads at once (a
// communicator's collectives, its receives and its outbox all wait), so a
// board guards whatever state it keeps.
class Board {
 public:
  virtual ~Board() = default;
  // Peer q's state, or why it cannot be had; may take up to a few hundred ms.
  virtual PeerState Peer(int q) = 0;
  // A cheap probe: true (and `why`) only when q's process is known to be gone.
  virtual bool Dead(int q, std::string* why) = 0;
  // "pid 1234 on node h1", as far as the board knows.
  virtual std::string Where(int q) const = 0;
  // Probes every peer for the hang watch (rank `rank` of `size` waiting): a
  // RemoteError naming the peers lost, or OK. Lost are processes known gone
  // and, where `unreachable_ms` > 0 and the board reaches peers over the
  // network, hosts that have answered nothing for that long (reach.h).
  // `report` is the hang report, `here` the short form (this rank's call).
  // The default asks Dead() of each peer in turn.
  virtual absl::Status Survey(int rank, int size, int unreachable_ms, absl::FunctionRef<std::string()> report,
                              const std::string& here);
};

class HangWatch {
 public:
  HangWatch(int rank, int size);
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // The collective's thread, around each collective.
  void Enter(const Call& c);
  void Done();
  // Publishes from now on into `at` (a shared-memory page), carrying over
  // what was published so far; null: this object's own words.
  void PublishAt(ProgressWords* at);
  const ProgressWords& published() const { return *mine_; }
  // Peers are read through `board` from now on (null: none, local facts only).
  void SetBoard(std::unique_ptr<Board> board);
  bool has_board() const { return board_ != nullptr; }
  // A hierarchy's part (hierarchy.h) probes through its world's watch
  // too, whose board sees every rank and names world ranks: a rank waiting
  // on a live node peer learns that a node its world needs is lost. `world`
  // outlives this watch; null: none.
  void SetWorld(const HangWatch* world) { world_ = world; }
  // False under WEFT_HANG_WATCH=0 (unsafe): nothing published or probed.
  bool on() const { return on_; }

  // The report, for a wait of `waited_ms` so far: this rank's call, the
  // ranks that have not arrived in it, and each peer's last completed call.
  std::string Report(long long waited_ms) const;
  // RemoteError naming the peers whose processes are gone (and the report),
  // or whose hosts have been unreachable for WEFT_UNREACHABLE_MS, or OK.
  // `waited_ms` < 0: found outside a wait (a transport's error).
  absl::Status ProbeDead(long long waited_ms) const;
  // "rank 0 of 4 is in call #3 all_reduce(...)": the report's first part.
  std::string Here() const;

  int rank() const { return rank_; }

 private:
  const int rank_, size_;
  const bool on_;
  const int unreachable_ms_;
  const HangWatch* world_ = nullptr;
  ProgressWords own_;
  ProgressWords* mine_ = &own_;
  std::unique_ptr<Board> board_;
};

// Whether `s` is ProbeDead's error (so it is not explained twice).
bool IsPeerDead(const absl::Status& s);

// WEFT_HANG_WARN_MS, and whether a wait of `timeout_ms` warns at all (only
// when the warning comes before the timeout, and the watch is on).
int HangWarnMs(int timeout_ms);

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_HANG_H_
