// A collective as point-to-point traffic, for the backends that move bytes
// with sends and receives (MPI, UCX). Each backend has an engine that runs a
// Schedule (mpi/pipeline.h, ucx/pipeline.h); the schedules themselves (this
// file, ring.h) and the choice among them (collectives.h) are shared.
//
// A Schedule is `lanes` independent walks of `steps` steps each. At every
// step a lane posts at most one send and one receive (a Transfer); when both
// are done the schedule's Complete hook runs (reduce what arrived, say) and
// the lane moves to its next step. Up to `window` lanes are in flight at
// once, which is what pipelines a large message: in the ring all-reduce a
// lane is one segment of every rank's chunk, so one segment is being reduced
// while the next is on the wire, and the data a step touches stays in cache.
//
// Lane `l` runs in slot `l % window` and starts when lane `l - window` has
// finished. A schedule may tag its transfers with the slot: messages between
// two ranks with one tag are then posted in the same order on both sides,
// which is all an ordered transport (MPI's non-overtaking rule, UCX's tag
// matching) needs to match them.
#ifndef WEFT_COMM_P2P_SCHEDULE_H_
#define WEFT_COMM_P2P_SCHEDULE_H_

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace weft {
namespace p2p {

// One lane's traffic at one step. `to` / `from` -1: no send / no receive.
// `from` kAnySource: a receive from any rank, whose sender the engine writes
// to *source once it has completed.
struct Transfer {
  const void* send = nullptr;
  size_t send_bytes = 0;
  int to = -1;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  int from = -1;
  int tag = 0;
  int* source = nullptr;
};
inline bool Receives(const Transfer& t) { return t.from >= 0 || t.from == kAnySource; }
// A transfer's peer in a message: its rank, or "any".
inline std::string Peer(int rank) { return rank == kAnySource ? "any" : std::to_string(rank); }

class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual size_t lanes() const = 0;
  virtual int steps() const = 0;
  // The transfers of `lane` at `step`; `slot` (lane % window) picks scratch.
  // May compute (e.g. widen the data it is about to send).
  virtual Transfer Post(size_t lane, int slot, int step) = 0;
  // Both transfers of (lane, step) have completed.
  virtual void Complete(size_t lane, int slot, int step) = 0;
};

// The engines' common walk: from (lane, step) of `slot`, the next transfer
// to post. Steps that move nothing are completed on the way, and a finished
// lane hands the slot to lane + window. False when the slot has no lanes
// left (it retires).
inline bool NextTransfer(Schedule& s, size_t window, int slot, size_t* lane, int* step, Transfer* t) {
  for (;;) {
    if (*step == s.steps()) {
      *lane += window;
      *step = 0;
      if (*lane >= s.lanes()) return false;
    }
    *t = s.Post(*lane, slot, *step);
    if (Receives(*t) || t->to >= 0) return true;
    s.Complete(*lane, slot, *step);
    ++*step;
  }
}

// Lane k carries transfers[k]; one step each, all lanes in flight at once.
class DirectSchedule final : public Schedule {
 public:
  explicit DirectSchedule(std::vector<Transfer> t) : t_(std::move(t)) {}
  size_t lanes() const override { return t_.size(); }
  int steps() const override { return 1; }
  Transfer Post(size_t lane, int, int) override { return t_[lane]; }
  void Complete(size_t, int, int) override {}
  int window() const { return static_cast<int>(std::max<size_t>(t_.size(), 1)); }

 private:
  std::vector<Transfer> t_;
};

// Exchange with every peer: lane k sends to rank+k+1 and receives from
// rank-k-1, tag k at both ends. `send(to)` / `recv(from)` give the buffers.
template <typename SendFn, typename RecvFn>
std::vector<Transfer> PeerExchange(int rank, int size, size_t bytes, SendFn send, RecvFn recv) {
  std::vector<Transfer> v;
  for (int k = 0; k + 1 < size; ++k) {
    Transfer x;
    x.to = (rank + k + 1) % size;
    x.from = (rank - k - 1 + size) % size;
    x.send = send(x.to);
    x.recv = recv(x.from);
    x.send_bytes = x.recv_bytes = bytes;
    x.tag = k;
    v.push_back(x);
  }
  return v;
}

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_SCHEDULE_H_
