// Fault injection for testing the tools that find bad ranks (weft-check):
// WEFT_FAULT makes one rank misbehave in a known way, so a harness can be
// shown to name that rank and nothing else.
//
//   WEFT_FAULT=corrupt:R    rank R's contribution to every reduction (all_reduce,
//                           reduce_scatter, reduce) is damaged: each element is
//                           doubled (integers shifted left by one; a float's
//                           exponent raised by one, zero and non-finite values
//                           left alone). The caller's buffer is not touched.
//   WEFT_FAULT=flip:R       one element of rank R's output is flipped (its top
//                           bit: a float's sign) once per collective, a
//                           different element each time.
//   WEFT_FAULT=delay:R:MS   rank R sleeps MS milliseconds before each collective.
//   WEFT_FAULT=stop:R:N     rank R takes part in its first N collectives, then
//                           stops: its N-th call does not return until the
//                           communicator's timeout (or an abort), and fails then
//                           with weftTimeout, and every later call fails at once
//                           without taking part. Its peers wait for it as for a
//                           hung rank, until their own timeouts. Nothing crashes.
//
// R is a rank of the world the process joined (weftCommInitWorld, InitRank,
// InitStore, InitInProcess); communicators split off it keep their ranks'
// world ranks, so a split that leaves R out is healthy. A multi-node world's
// node and inter-node communicators run steps of the world's calls and are
// left alone (Exempt): the fault acts on the world's call once. "Collectives"
// are every call a rank makes at a checked entry point: all_reduce,
// reduce_scatter, all_gather, broadcast, reduce, gather, scatter,
// all_to_all(v), barrier, send, recv, and the direct-buffer reductions
// all_reduce_pieces and all_reduce_ready (comm/direct.h); a rank counts those
// of its world and every split of it together, a send and a recv as one each.
// corrupt damages what the reductions read (all_reduce_ready: exactly the
// part the call must reach, which the faulty rank then offers alone, so that
// the part reduced is the part damaged); flip acts on what a call writes on
// the rank (a gather's or reduce's root only). corrupt and flip act on host
// memory only.
//
// Inert unless set: the entry points pay one relaxed load (Armed). Loud when
// set: every rank warns on stderr at init. A value that does not parse, or a
// rank outside the world, is an init error naming the value.
#ifndef WEFT_COMM_FAULT_H_
#define WEFT_COMM_FAULT_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/direct.h"
#include "core/dtype.h"

namespace weft {
namespace fault {

enum class Kind { kNone, kCorrupt, kFlip, kDelay, kStop };

struct Spec {
  Kind kind = Kind::kNone;
  int rank = -1;
  int delay_ms = 0;    // kDelay
  long long after = 0;  // kStop: collectives taken part in before it stops
  std::string text;    // the value as given, for messages
};

// Parses a WEFT_FAULT value ("" is kNone); errors name the value.
absl::StatusOr<Spec> Parse(const std::string& text);

// True once an init has found a valid, non-empty WEFT_FAULT.
extern std::atomic<bool> g_armed;
inline bool Armed() { return g_armed.load(std::memory_order_relaxed); }

// At the start of every init: reads WEFT_FAULT (once per process) and
// fails if it does not parse.
absl::Status CheckEnv();
// At the end of every init: with a fault set, checks its rank against the
// world and its kind against the memory, and warns on this rank's stderr.
absl::StatusOr<std::unique_ptr<Communicator>> AtInit(absl::StatusOr<std::unique_ptr<Communicator>> comm);
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> AtInit(
    absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> comms);

// What a checked entry point is about to issue. `send` is what the op
// reads as this rank's contribution, `recv` what it writes on this rank.
struct Call {
  const void* send = nullptr;
  size_t send_bytes = 0;
  void* recv = nullptr;
  size_t recv_bytes = 0;
  DataType dtype = DataType::kFloat32;
  bool reduces = false;
};
using Op = std::function<absl::Status(const void* send)>;

// The fault's version of `op` when `c` is the faulty rank's.
std::function<absl::Status()> Arm(Communicator& c, const Call& call, Op op);

// The op an entry point issues: `op(call.send)` when no fault is set.
template <typename F>
std::function<absl::Status()> Hook(Communicator& c, const Call& call, F op) {
  if (!Armed()) return [op = std::move(op), send = call.send] { return op(send); };
  return Arm(c, call, Op(std::move(op)));
}

// AllReducePieces' op, which reads `pieces` (their sends) and writes them
// (their recvs): corrupt gives it copies of the sends, flip one element of
// one piece's recv.
using PiecesOp = std::function<absl::Status(const std::vector<Piece>& pieces)>;
std::function<absl::Status()> ArmPieces(Communicator& c, std::shared_ptr<const std::vector<Piece>> pieces,
                                        DataType t, PiecesOp op);
template <typename F>
std::function<absl::Status()> HookPieces(Communicator& c, std::shared_ptr<const std::vector<Piece>> pieces,
                                         DataType t, F op) {
  if (!Armed()) return [op = std::move(op), pieces = std::move(pieces)] { return op(*pieces); };
  return ArmPieces(c, std::move(pieces), t, PiecesOp(std::move(op)));
}

// AllReduceReady's offer, once its call runs (the part [reduced, upto) of
// `parts` is what every rank reduces at least): `offer` unless corrupt is
// this rank's, which damages [reduced, upto) in place (the call overwrites
// it with the result) and offers only `upto`.
size_t ReadyOffer(const Communicator& c, const std::vector<Piece>& parts, size_t reduced, size_t offer, size_t upto,
                  DataType t);

// Split: `child` belongs to the same world rank as `parent`.
void Inherit(const Communicator& parent, const Communicator* child);
// A part of a world that runs steps of the world's own calls (a multi-node
// world's node and inter-node communicators, comm/p2p/hierarchy.h): the fault
// acted on the world's call already, so the part's calls are left alone.
void Exempt(const Communicator* part);
// ~Communicator.
void Forget(const Communicator* c);

}  // namespace fault
}  // namespace weft

#endif  // WEFT_COMM_FAULT_H_
