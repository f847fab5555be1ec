#include "comm/p2p/hang.h"

#include <atomic>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/p2p/peer_loss.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

constexpr char kDeadUrl[] = "weft/peer-dead";

std::atomic<bool> g_peer_lost{false};

std::atomic_ref<uint64_t> Word(uint64_t& w) { return std::atomic_ref<uint64_t>(w); }
uint64_t Load(const uint64_t& w) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(w)).load(std::memory_order_acquire);
}

Call CallOf(const uint64_t (&words)[kCallWords]) {
  Call c;
  std::memcpy(c.words, words, sizeof(c.words));
  return c;
}

// "#12 all_reduce(count 1000, float32, sum)", or "none" before the first.
std::string Numbered(uint64_t n, const uint64_t (&words)[kCallWords]) {
  if (n == 0) return "none";
  return absl::StrCat("#", n, " ", Describe(CallOf(words)));
}

}  // namespace

ProgressWords ReadProgress(const ProgressWords& w) {
  ProgressWords out;
  // The writer stores the call's words before its count (release), so a copy
  // whose counts did not move while it was taken is consistent.
  for (int attempt = 0; attempt < 8; ++attempt) {
    out.entered = Load(w.entered);
    out.done = Load(w.done);
    for (size_t i = 0; i < kCallWords; ++i) {
      out.entered_call[i] = Load(w.entered_call[i]);
      out.done_call[i] = Load(w.done_call[i]);
    }
    if (Load(w.entered) == out.entered && Load(w.done) == out.done) break;
  }
  return out;
}

HangWatch::HangWatch(int rank, int size)
    : rank_(rank), size_(size), on_(Env::Get().hang_watch), unreachable_ms_(Env::Get().unreachable_ms) {}

void HangWatch::Enter(const Call& c) {
  if (!on_) return;
  for (size_t i = 0; i < kCallWords; ++i) Word(mine_->entered_call[i]).store(c.words[i], std::memory_order_relaxed);
  Word(mine_->entered).store(mine_->entered + 1, std::memory_order_release);
}

void HangWatch::Done() {
  if (!on_ || mine_->done == mine_->entered) return;  // a call that never entered (refused early)
  for (size_t i = 0; i < kCallWords; ++i) {
    Word(mine_->done_call[i]).store(mine_->entered_call[i], std::memory_order_relaxed);
  }
  Word(mine_->done).store(mine_->entered, std::memory_order_release);
}

void HangWatch::PublishAt(ProgressWords* at) {
  ProgressWords* next = at != nullptr ? at : &own_;
  if (next == mine_) return;
  const ProgressWords now = *mine_;
  for (size_t i = 0; i < kCallWords; ++i) {
    Word(next->entered_call[i]).store(now.entered_call[i], std::memory_order_relaxed);
    Word(next->done_call[i]).store(now.done_call[i], std::memory_order_relaxed);
  }
  Word(next->done).store(now.done, std::memory_order_release);
  Word(next->entered).store(now.entered, std::memory_order_release);
  mine_ = next;
}

void HangWatch::SetBoard(std::unique_ptr<Board> board) { board_ = std::move(board); }

std::string HangWatch::Here() const {
  const ProgressWords me = ReadProgress(*mine_);
  return absl::StrFormat("rank %d of %d is in call %s", rank_, size_, Numbered(me.entered, me.entered_call));
}

std::string HangWatch::Report(long long waited_ms) const {
  const ProgressWords me = ReadProgress(*mine_);
  std::string out = waited_ms >= 0 ? absl::StrFormat("rank %d of %d has waited %lld ms in call %s", rank_, size_,
                                                     waited_ms, Numbered(me.entered, me.entered_call))
                                   : Here();
  if (!on_) {
    absl::StrAppend(&out, "; the peers' progress is unknown (the hang watch is off: WEFT_HANG_WATCH=0)");
    return out;
  }
  if (me.done == me.entered && me.entered != 0) absl::StrAppend(&out, " (after it completed here)");
  if (board_ == nullptr) {
    absl::StrAppend(&out, "; the peers' progress is unknown (no status channel on this communicator)");
    return out;
  }
  std::string missing, silent, details;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const PeerState p = board_->Peer(q);
    std::string line = absl::StrFormat("rank %d (%s): ", q, p.where);
    switch (p.kind) {
      case PeerState::kDead:
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", q);
        absl::StrAppend(&line, "dead, ", p.why);
        break;
      case PeerState::kUnknown:
        absl::StrAppend(&silent, silent.empty() ? "" : ", ", q);
        absl::StrAppend(&line, "no answer, ", p.why);
        break;
      case PeerState::kGone:
        absl::StrAppend(&line, "has destroyed this communicator");
        break;
      case PeerState::kKnown: {
        const ProgressWords& w = p.progress;
        if (w.entered < me.entered) {
          absl::StrAppend(&missing, missing.empty() ? "" : ", ", q);
          absl::StrAppend(&line, "not arrived");
        } else if (w.entered == me.entered) {
          absl::StrAppend(&line, w.done == w.entered ? "completed this call" : "in this call");
        } else {
          absl::StrAppend(&line, "ahead, in call ", Numbered(w.entered, w.entered_call));
        }
        absl::StrAppend(&line, ", last completed ", Numbered(w.done, w.done_call));
        break;
      }
    }
    absl::StrAppend(&details, "; ", line);
  }
  if (!missing.empty()) absl::StrAppend(&out, "; not arrived: rank(s) {", missing, "}");
  if (!silent.empty()) absl::StrAppend(&out, "; no answer from rank(s) {", silent, "}");
  if (missing.empty() && silent.empty()) absl::StrAppend(&out, "; every peer has reached this call");
  absl::StrAppend(&out, details);
  return out;
}

absl::Status Board::Survey(int rank, int size, int, absl::FunctionRef<std::string()> report, const std::string&) {
  for (int q = 0; q < size; ++q) {
    std::string why;
    if (q == rank || !Dead(q, &why)) continue;
    return RemoteError("rank %d: rank %d (%s) is dead (%s); this collective cannot complete. %s", rank, q, Where(q),
                       why, report());
  }
  return absl::OkStatus();
}

absl::Status HangWatch::ProbeDead(long long waited_ms) const {
  if (!on_) return absl::OkStatus();
  const auto report = [&] { return Report(waited_ms); };
  const std::string here = Here();
  absl::Status lost;
  // The world's board first: it names world ranks and nodes.
  if (world_ != nullptr && world_->board_ != nullptr) {
    lost = world_->board_->Survey(world_->rank_, world_->size_, unreachable_ms_, report, here);
  }
  if (lost.ok() && board_ != nullptr) lost = board_->Survey(rank_, size_, unreachable_ms_, report, here);
  if (lost.ok()) return lost;
  lost.SetPayload(kDeadUrl, absl::Cord("lost"));
  NotePeerLost();
  return lost;
}

void NotePeerLost() { g_peer_lost.store(true, std::memory_order_relaxed); }
bool PeerLost() { return g_peer_lost.load(std::memory_order_relaxed); }

bool IsPeerDead(const absl::Status& s) { return s.GetPayload(kDeadUrl).has_value(); }

int HangWarnMs(int timeout_ms) {
  if (!Env::Get().hang_watch) return 0;
  const int warn = Env::Get().hang_warn_ms;
  return warn > 0 && warn < timeout_ms ? warn : 0;
}

}  // namespace p2p
}  // namespace weft
