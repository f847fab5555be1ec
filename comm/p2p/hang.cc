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

HangWatch::HangWatch(int rank, int size) : rank_(rank), size_(size) {}

void HangWatch::Enter(const Call& c) {
  for (size_t i = 0; i < kCallWords; ++i) Word(mine_->entered_call[i]).store(c.words[i], std::memory_order_relaxed);
  Word(mine_->entered).store(mine_->entered + 1, std::memory_order_release);
}

void HangWatch::Done() {
  if (mine_->done == mine_->entered) return;  // a call that never entered (refused early)
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

std::string HangWatch::Report(long long waited_ms) const {
  const ProgressWords me = ReadProgress(*mine_);
  std::string out = waited_ms >= 0 ? absl::StrFormat("rank %d of %d has waited %lld ms in call %s", rank_, size_,
                                                     waited_ms, Numbered(me.entered, me.entered_call))
                                   : absl::StrFormat("rank %d of %d is in call %s", rank_, size_,
                                                     Numbered(me.entered, me.entered_call));
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

absl::Status HangWatch::ProbeDead(long long waited_ms) const {
  if (board_ == nullptr) return absl::OkStatus();
  for (int q = 0; q < size_; ++q) {
    std::string why;
    if (q == rank_ || !board_->Dead(q, &why)) continue;
    absl::Status dead = RemoteError("rank %d: rank %d (%s) is dead (%s); this collective cannot complete. %s", rank_,
                                    q, board_->Where(q), why, Report(waited_ms));
    dead.SetPayload(kDeadUrl, absl::Cord(std::to_string(q)));
    NotePeerLost();
    return dead;
  }
  return absl::OkStatus();
}

void NotePeerLost() { g_peer_lost.store(true, std::memory_order_relaxed); }
bool PeerLost() { return g_peer_lost.load(std::memory_order_relaxed); }

bool IsPeerDead(const absl::Status& s) { return s.GetPayload(kDeadUrl).has_value(); }

int HangWarnMs(int timeout_ms) {
  const int warn = Env::Get().hang_warn_ms;
  return warn > 0 && warn < timeout_ms ? warn : 0;
}

}  // namespace p2p
}  // namespace weft
