#include "comm/ucx/pipeline.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "comm/p2p/exchange.h"
#include "comm/ucx/ucp_api.h"
#include "core/status.h"

namespace weft {
namespace ucx {
namespace {

constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};

// Users' point-to-point tags live above kUserTagBit within the schedule's
// field; every collective's tag (a lane, a slot, a step) is below the rank
// count or the window, so below the bit too.
static_assert(p2p::kUserTagBit + kMaxTag < (1 << kTagBits), "user tags fit the schedule's tag field");
static_assert(kMaxRanks <= p2p::kUserTagBit, "a collective's lane tags stay below the users' tags");

ucp_tag_t MakeTag(uint32_t id, int sender, int tag) {
  return (ucp_tag_t{id} << (kRankBits + kTagBits)) | (ucp_tag_t(static_cast<uint32_t>(sender)) << kTagBits) |
         ucp_tag_t(static_cast<uint32_t>(tag) & ((1u << kTagBits) - 1));
}

// A receive from any rank matches every sender's rank bits.
constexpr ucp_tag_t kRankField = ((ucp_tag_t{1} << kRankBits) - 1) << kTagBits;
constexpr ucp_tag_t kAnySenderMask = kFullMask & ~kRankField;
int SenderOf(ucp_tag_t tag) { return static_cast<int>((tag & kRankField) >> kTagBits); }

struct Slot {
  size_t lane = 0;
  int step = 0;
  bool busy = false;
  int from = -1, to = -1;
  void* recv = nullptr;  // UCP requests in flight (null: done or none)
  void* send = nullptr;
  size_t recv_bytes = 0;  // what the receive was posted for
  int* source = nullptr;  // a receive from any rank: where its sender goes
};

class Runner {
 public:
  Runner(p2p::Schedule& s, int window, const Link& link, const p2p::Patience& p)
      : s_(s), link_(link), lanes_(s.lanes()), steps_(s.steps()),
        window_(static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(window, 1)), lanes_))),
        slots_(static_cast<size_t>(window_)), backoff_(p) {}

  absl::Status Run() {
    if (lanes_ == 0 || steps_ == 0) return absl::OkStatus();
    absl::Status s = Loop();
    if (!s.ok()) Abandon();
    return s;
  }

 private:
  absl::Status Loop() {
    for (int i = 0; i < window_; ++i) {
      ++active_;
      RETURN_IF_ERROR(Advance(i, static_cast<size_t>(i), 0));
    }
    while (active_ > 0) {
      done_.clear();
      {
        Node::Lock lock(*link_.node);
        link_.node->Progress();
        for (size_t i = 0; i < slots_.size(); ++i) {
          Slot& sl = slots_[i];
          if (!sl.busy) continue;
          RETURN_IF_ERROR(ReapReceive(sl));
          RETURN_IF_ERROR(Reap(&sl.send, "send to", sl.to));
          if (sl.recv == nullptr && sl.send == nullptr) done_.push_back(static_cast<int>(i));
        }
      }
      // Completing a step (reducing what arrived) runs outside the lock.
      for (int i : done_) {
        Slot& sl = slots_[static_cast<size_t>(i)];
        sl.busy = false;
        s_.Complete(sl.lane, i, sl.step);
        RETURN_IF_ERROR(Advance(i, sl.lane, sl.step + 1));
      }
      if (!done_.empty()) {
        backoff_.Progress();
      } else {
        absl::Status idle = Idle();
        if (!idle.ok()) return Describe(idle);
      }
    }
    return absl::OkStatus();
  }

  // Under the block policy a waiting rank sleeps on the worker's event fd
  // (node.h) where it has one; Backoff decides when, and naps otherwise.
  absl::Status Idle() {
    Node* node = link_.node;
    if (!node->CanSleep()) return backoff_.Idle();
    return backoff_.Idle([node](std::chrono::microseconds limit) { node->Sleep(limit); });
  }

  // A finished request is freed and its slot cleared; a failed one is an error.
  absl::Status Reap(void** req, const char* what, int peer) {
    if (*req == nullptr) return absl::OkStatus();
    const ucs_status_t st = Ucp().request_check_status(*req);
    if (st == UCS_INPROGRESS) return absl::OkStatus();
    Ucp().request_free(*req);
    *req = nullptr;
    return Failed(st, what, peer);
  }

  // A receive as Reap, then Received.
  absl::Status ReapReceive(Slot& sl) {
    if (sl.recv == nullptr) return absl::OkStatus();
    ucp_tag_recv_info_t info;
    std::memset(&info, 0, sizeof(info));
    const ucs_status_t st = Ucp().tag_recv_request_test(sl.recv, &info);
    if (st == UCS_INPROGRESS) return absl::OkStatus();
    Ucp().request_free(sl.recv);
    sl.recv = nullptr;
    RETURN_IF_ERROR(Failed(st, "receive from", sl.from));
    return Received(sl, info);
  }

  // A completed receive: from any rank, its sender is now known. It must
  // bring exactly what it was posted for: a shorter message is another
  // call's (a rank whose arguments differ).
  absl::Status Received(Slot& sl, const ucp_tag_recv_info_t& info) const {
    if (sl.source != nullptr) sl.from = *sl.source = SenderOf(info.sender_tag);
    if (info.length == sl.recv_bytes) return absl::OkStatus();
    return InvalidUsage("rank %d: a message from rank %d has %zu bytes where this collective expects %zu: the ranks "
                        "passed different arguments (count, type, root) or issued different collectives", link_.rank,
                        sl.from, static_cast<size_t>(info.length), sl.recv_bytes);
  }

  // `peer` may be kAnySource (a receive from any rank that failed).
  absl::Status Failed(ucs_status_t st, const char* what, int peer) const {
    if (st == UCS_OK) return absl::OkStatus();
    const std::string who = p2p::Peer(peer);
    if (st == UCS_ERR_MESSAGE_TRUNCATED) {
      return InvalidUsage("rank %d: a message from rank %s has more bytes than the receive this collective posted "
                          "for it: the ranks passed different arguments (count, type, root) or issued different "
                          "collectives", link_.rank, who);
    }
    if (st == UCS_ERR_CONNECTION_RESET || st == UCS_ERR_ENDPOINT_TIMEOUT || st == UCS_ERR_UNREACHABLE ||
        st == UCS_ERR_REJECTED) {
      return RemoteError("rank %d: UCX %s rank %s failed: %s: rank %s has exited or lost its connection", link_.rank,
                         what, who, Ucp().status_string(st), who);
    }
    return SystemError("rank %d: UCX %s rank %s failed: %s", link_.rank, what, who, Ucp().status_string(st));
  }

  // Posts (lane, step) in `slot`, running through steps that move nothing;
  // when the lane is done, starts the slot's next lane.
  absl::Status Advance(int slot, size_t lane, int step) {
    p2p::Transfer t;
    if (!p2p::NextTransfer(s_, static_cast<size_t>(window_), slot, &lane, &step, &t)) {
      --active_;
      return absl::OkStatus();
    }
    Slot& sl = slots_[static_cast<size_t>(slot)];
    sl.lane = lane;
    sl.step = step;
    sl.busy = true;
    sl.from = t.from;
    sl.to = t.to;
    sl.recv_bytes = t.recv_bytes;
    sl.source = t.source;
    Node::Lock lock(*link_.node);
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof(param));
    // The receive goes first so the peer's message matches it at once.
    if (p2p::Receives(t)) {
      const bool any = t.from == kAnySource;
      const ucp_tag_t tag = MakeTag(link_.id, any ? 0 : t.from, t.tag);
      // Always a request, tested in ReapReceive: what came (its length and
      // sender) is known from it alone.
      ucp_request_param_t rparam = param;
      rparam.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      ucs_status_ptr_t r = Ucp().tag_recv_nbx(link_.node->worker(), t.recv, t.recv_bytes, tag,
                                            any ? kAnySenderMask : kFullMask, &rparam);
      // A message already waiting may fail the receive at once (truncated, say).
      if (UCS_PTR_IS_ERR(r)) return Failed(UCS_PTR_STATUS(r), "receive from", t.from);
      sl.recv = r;
    }
    if (t.to >= 0) {
      ASSIGN_OR_RETURN(ucp_ep_h ep, link_.node->Endpoint(link_.peers[static_cast<size_t>(t.to)]));
      ucs_status_ptr_t r = Ucp().tag_send_nbx(ep, t.send, t.send_bytes, MakeTag(link_.id, link_.rank, t.tag), &param);
      if (UCS_PTR_IS_ERR(r)) return Posting("ucp_tag_send_nbx to", t.to, UCS_PTR_STATUS(r));
      sl.send = r;  // null: completed at once (the data was copied out)
    }
    return absl::OkStatus();
  }

  absl::Status Posting(const char* call, int peer, ucs_status_t st) const {
    return SystemError("rank %d: %s rank %d failed: %s", link_.rank, call, peer, Ucp().status_string(st));
  }

  // A timeout (whose message is the hang report) names the peers this rank
  // was waiting on in this step.
  absl::Status Describe(const absl::Status& s) const {
    if (!absl::IsDeadlineExceeded(s)) return s;
    std::string from, to;
    for (const Slot& sl : slots_) {
      if (sl.recv != nullptr) absl::StrAppend(&from, from.empty() ? "" : ",", p2p::Peer(sl.from));
      if (sl.send != nullptr) absl::StrAppend(&to, to.empty() ? "" : ",", sl.to);
    }
    return absl::Status(s.code(), absl::StrCat(s.message(), "; still waiting to receive from rank(s) {", from,
                                               "} and to send to rank(s) {", to, "}"));
  }

  // After a failure: receives are cancelled so no late message lands in a
  // buffer; sends cannot be taken back, so their requests are only released
  // (the buffers they read must outlive them: P2pComm leaks its scratch).
  void Abandon() {
    Node::Lock lock(*link_.node);
    for (Slot& sl : slots_) {
      if (sl.recv != nullptr) {
        Ucp().request_cancel(link_.node->worker(), sl.recv);
        Ucp().request_free(sl.recv);
        sl.recv = nullptr;
      }
      if (sl.send != nullptr) {
        Ucp().request_free(sl.send);
        sl.send = nullptr;
      }
    }
  }

  p2p::Schedule& s_;
  const Link& link_;
  const size_t lanes_;
  const int steps_;
  const int window_;
  std::vector<Slot> slots_;
  std::vector<int> done_;  // slots whose step finished in this poll
  p2p::Backoff backoff_;
  int active_ = 0;
};

}  // namespace

absl::Status RunPipeline(p2p::Schedule& s, int window, const Link& link, const p2p::Patience& patience) {
  return Runner(s, window, link, patience).Run();
}

p2p::Outbox::Wire SendWire(const Link* link) {
  p2p::Outbox::Wire w;
  w.post = [link](const void* data, size_t bytes, int peer, int tag) -> absl::StatusOr<void*> {
    Node::Lock lock(*link->node);
    ASSIGN_OR_RETURN(ucp_ep_h ep, link->node->Endpoint(link->peers[static_cast<size_t>(peer)]));
    ucp_request_param_t param;
    std::memset(&param, 0, sizeof(param));
    ucs_status_ptr_t r = Ucp().tag_send_nbx(ep, data, bytes, MakeTag(link->id, link->rank, tag), &param);
    if (UCS_PTR_IS_ERR(r)) {
      return SystemError("rank %d: ucp_tag_send_nbx to rank %d failed: %s", link->rank, peer,
                         Ucp().status_string(UCS_PTR_STATUS(r)));
    }
    return static_cast<void*>(r);  // null: completed at once (the data was copied out)
  };
  w.test = [link](void* req) -> absl::StatusOr<bool> {
    Node::Lock lock(*link->node);
    link->node->Progress();
    const ucs_status_t st = Ucp().request_check_status(req);
    if (st == UCS_INPROGRESS) return false;
    Ucp().request_free(req);
    if (st != UCS_OK) return SystemError("rank %d: a UCX send failed: %s", link->rank, Ucp().status_string(st));
    return true;
  };
  w.drop = [link](void* req) {
    Node::Lock lock(*link->node);
    Ucp().request_free(req);
  };
  return w;
}

}  // namespace ucx
}  // namespace weft
