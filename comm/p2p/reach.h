// Whether peers' hosts still answer at the network level, for the hang
// watch's TCP board (status_channel.h). A process that dies leaves a kernel
// that refuses connections to its port: that is a death, told at once. A host
// that is down, frozen or cut off shakes nothing at all; no reset ever
// arrives, and without this a rank waits out its whole timeout. A live host's
// kernel completes a TCP handshake in microseconds even when the process
// behind the port is stalled (the kernel accepts into the listen queue), so a
// host that has completed none for a while, in probes made every few hundred
// milliseconds, is unreachable: a cut link, a crashed or frozen node.
//
//   std::vector<Handshake> h = ConnectAll(endpoints, 300);
//   silence.Record(Clock::now(), h);
//   if (silence.Silent(q, Clock::now()) >= window) ... q's host is unreachable
#ifndef WEFT_COMM_P2P_REACH_H_
#define WEFT_COMM_P2P_REACH_H_

#include <chrono>
#include <string>
#include <vector>

#include "comm/bootstrap/wire.h"

namespace weft {
namespace p2p {

// What one connection attempt found.
struct Handshake {
  enum Kind {
    kAccepted,  // the handshake completed: the host is up
    kRefused,   // the host's kernel refused: nobody listens there any more
    kNoRoute,   // this host has no route or device towards it (ENETUNREACH, ENETDOWN)
    kSilent,    // no answer within the time allowed, or the host is unreachable (EHOSTUNREACH)
    kSkipped,   // not probed (this rank, a peer without an address)
    kFailed,    // a local failure (no socket): says nothing about the peer
  } kind = kSkipped;
  int err = 0;  // the errno behind anything but kAccepted and kSkipped
};

// Whether a kind counts as silence towards the unreachable window.
inline bool IsSilence(Handshake::Kind k) { return k == Handshake::kNoRoute || k == Handshake::kSilent; }

// Connects to every endpoint at once and waits at most `within_ms` for all
// of them; entries with `len` 0 are skipped. Each connection is closed at
// once: only the handshake is asked for.
std::vector<Handshake> ConnectAll(const std::vector<bootstrap::Endpoint>& to, int within_ms);

// How long each peer has been silent, over consecutive probe rounds. A
// round that comes more than kMaxGap after the previous one starts every
// peer over: silence counts only while a rank keeps probing (one wait, or
// waits back to back), never from a stale probe of an earlier stall.
class Silence {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kMaxGap{2000};

  explicit Silence(size_t peers) : since_(peers), first_err_(peers, 0) {}
  void Record(Clock::time_point now, const std::vector<Handshake>& shakes);
  // Zero when q answered in the last round (or was never silent).
  Clock::duration Silent(size_t q, Clock::time_point now) const;
  // The errno of q's first silent answer in its current silence (0: none).
  int FirstErr(size_t q) const { return first_err_[q]; }

 private:
  std::vector<Clock::time_point> since_;  // epoch: not silent
  std::vector<int> first_err_;
  Clock::time_point last_{};
};

// "2, 3": ranks as a list.
std::string RankList(const std::vector<int>& ranks);

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_REACH_H_
