#include "comm/mpi/pipeline.h"

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/bootstrap/mpi_runtime.h"
#include "comm/p2p/exchange.h"
#include "core/status.h"

namespace weft {
namespace mpi {
namespace {

// Releases the point-to-point requests still pending after a failure
// (receives at even indices, sends at odd ones). Receives are cancelled so no
// late message lands in a buffer; sends cannot be (OpenMPI ignores it), so a
// buffer a send reads must outlive the communicator: see P2pComm::Scratch.
void Abandon(std::vector<MPI_Request>& reqs) {
  CallLock lock;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i] == MPI_REQUEST_NULL) continue;
    if (i % 2 == 0) MPI_Cancel(&reqs[i]);
    MPI_Request_free(&reqs[i]);
  }
}

}  // namespace

absl::Status CheckMpi(int rc, const char* call, int peer) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  if (peer >= 0) {
    return SystemError("%s (peer rank %d) failed: %s (the peer may have exited or lost its connection)", call, peer,
                       ErrorString(rc));
  }
  return SystemError("%s failed: %s", call, ErrorString(rc));
}

absl::StatusOr<int> Poller::Some(int n, MPI_Request* reqs, int* done, MPI_Status* statuses) {
  for (;;) {
    int count = 0;
    int rc;
    {
      CallLock lock;
      rc = MPI_Testsome(n, reqs, &count, done, statuses);
    }
    if (rc == MPI_ERR_IN_STATUS && statuses != MPI_STATUSES_IGNORE) {
      for (int k = 0; k < count; ++k) {
        const MPI_Status& st = statuses[k];
        if (st.MPI_ERROR == MPI_SUCCESS) continue;
        int cls = st.MPI_ERROR;
        MPI_Error_class(st.MPI_ERROR, &cls);
        if (cls == MPI_ERR_TRUNCATE) {
          return InvalidUsage("a message from rank %d has more bytes than the receive this collective posted for "
                              "it: the ranks passed different arguments (count, type, root) or issued different "
                              "collectives", st.MPI_SOURCE);
        }
        return CheckMpi(st.MPI_ERROR, "a point-to-point transfer", st.MPI_SOURCE);
      }
    }
    RETURN_IF_ERROR(CheckMpi(rc, "MPI_Testsome"));
    if (count == MPI_UNDEFINED) return InternalError("polled %d requests, none active", n);
    if (count > 0) {
      backoff_.Progress();
      return count;
    }
    RETURN_IF_ERROR(backoff_.Idle());
  }
}

absl::Status WaitAll(int n, MPI_Request* reqs, const WaitSpec& w, const char* what) {
  Poller poller(w);
  std::vector<int> done(static_cast<size_t>(n));
  int pending = static_cast<int>(std::count_if(reqs, reqs + n, [](MPI_Request r) { return r != MPI_REQUEST_NULL; }));
  while (pending > 0) {
    absl::StatusOr<int> got = poller.Some(n, reqs, done.data());
    // A nonblocking collective's request may be neither cancelled nor
    // freed (MPI 3.1, 5.12): on failure it is left pending with its communicator.
    if (!got.ok()) return Annotate(got.status(), what);
    pending -= *got;
  }
  return absl::OkStatus();
}

namespace {

// The in-flight state of one slot.
struct Slot {
  size_t lane = 0;
  int step = 0;
  bool busy = false;
  int from = -1, to = -1;  // peers of the transfers in flight, for messages
  size_t recv_bytes = 0;   // what the receive was posted for
  int* source = nullptr;   // a receive from any rank: where its sender goes
};

class Runner {
 public:
  Runner(Schedule& s, int window, const WaitSpec& w)
      : s_(s), w_(w), lanes_(s.lanes()), steps_(s.steps()),
        window_(static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(window, 1)), lanes_))),
        slots_(static_cast<size_t>(window_)), reqs_(2 * slots_.size(), MPI_REQUEST_NULL), done_(reqs_.size()),
        statuses_(reqs_.size()),
        poller_(w) {}

  absl::Status Run() {
    if (lanes_ == 0 || steps_ == 0) return absl::OkStatus();
    for (int i = 0; i < window_; ++i) RETURN_IF_ERROR(Fail(Start(i, static_cast<size_t>(i))));
    while (active_ > 0) {
      absl::StatusOr<int> got =
          poller_.Some(static_cast<int>(reqs_.size()), reqs_.data(), done_.data(), statuses_.data());
      if (!got.ok()) return Fail(Describe(got.status()));
      for (int k = 0; k < *got; ++k) {
        if (done_[k] % 2 == 0) RETURN_IF_ERROR(Fail(Received(slots_[done_[k] / 2], statuses_[k])));
        const int i = done_[k] / 2;
        Slot& sl = slots_[i];
        if (!sl.busy || reqs_[2 * i] != MPI_REQUEST_NULL || reqs_[2 * i + 1] != MPI_REQUEST_NULL) continue;
        sl.busy = false;  // both halves done; handled once even if both were in this batch
        s_.Complete(sl.lane, i, sl.step);
        RETURN_IF_ERROR(Fail(Advance(i, sl.lane, sl.step + 1)));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Start(int slot, size_t lane) {
    ++active_;
    return Advance(slot, lane, 0);
  }

  // Posts (lane, step) in `slot`, running through steps that move nothing;
  // when the lane is done, starts the slot's next lane.
  absl::Status Advance(int slot, size_t lane, int step) {
    Transfer t;
    if (!p2p::NextTransfer(s_, static_cast<size_t>(window_), slot, &lane, &step, &t)) {
      --active_;
      return absl::OkStatus();
    }
    Slot& sl = slots_[slot];
    sl = {lane, step, true, t.from, t.to, t.recv_bytes, t.source};
    const bool user = (t.tag & p2p::kUserTagBit) != 0;
    const MPI_Comm comm = user ? w_.users : w_.comm;
    const int tag = user ? t.tag & ~p2p::kUserTagBit : t.tag;
    CallLock lock;
    // The receive goes first so a rendezvous send from the peer matches at once.
    if (p2p::Receives(t)) {
      const int from = t.from == kAnySource ? MPI_ANY_SOURCE : t.from;
      RETURN_IF_ERROR(CheckMpi(MPI_Irecv(t.recv, static_cast<int>(t.recv_bytes), MPI_BYTE, from, tag, comm,
                                         &reqs_[2 * slot]), "MPI_Irecv", t.from));
    }
    if (t.to >= 0) {
      RETURN_IF_ERROR(CheckMpi(MPI_Isend(t.send, static_cast<int>(t.send_bytes), MPI_BYTE, t.to, tag, comm,
                                         &reqs_[2 * slot + 1]), "MPI_Isend", t.to));
    }
    return absl::OkStatus();
  }

  // A completed receive: from any rank, its sender is now known. It must
  // bring exactly what it was posted for: a shorter message is another
  // call's (a rank whose arguments differ), not this one's data.
  absl::Status Received(Slot& sl, const MPI_Status& st) const {
    if (sl.source != nullptr) sl.from = *sl.source = st.MPI_SOURCE;
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (static_cast<size_t>(got) == sl.recv_bytes) return absl::OkStatus();
    return InvalidUsage("rank %d: a message from rank %d has %d bytes where this collective expects %zu: the ranks "
                        "passed different arguments (count, type, root) or issued different collectives", w_.rank,
                        sl.from, got, sl.recv_bytes);
  }

  // A timeout (whose message is the hang report) names the peers this rank
  // was waiting on in this step.
  absl::Status Describe(const absl::Status& s) const {
    if (!absl::IsDeadlineExceeded(s)) return s;
    std::string from, to;
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (reqs_[2 * i] != MPI_REQUEST_NULL) absl::StrAppend(&from, from.empty() ? "" : ",", p2p::Peer(slots_[i].from));
      if (reqs_[2 * i + 1] != MPI_REQUEST_NULL) absl::StrAppend(&to, to.empty() ? "" : ",", slots_[i].to);
    }
    return absl::Status(s.code(), absl::StrCat(s.message(), "; still waiting to receive from rank(s) {", from,
                                               "} and to send to rank(s) {", to, "}"));
  }

  absl::Status Fail(absl::Status s) {
    if (!s.ok()) Abandon(reqs_);
    return s;
  }

  Schedule& s_;
  const WaitSpec w_;
  const size_t lanes_;
  const int steps_;
  const int window_;
  std::vector<Slot> slots_;
  std::vector<MPI_Request> reqs_;  // slot i: [2i] receive, [2i+1] send
  std::vector<int> done_;
  std::vector<MPI_Status> statuses_;  // of done_'s requests
  Poller poller_;
  int active_ = 0;
};

}  // namespace

absl::Status RunPipeline(Schedule& s, int window, const WaitSpec& w) { return Runner(s, window, w).Run(); }

p2p::Outbox::Wire SendWire(MPI_Comm users) {
  p2p::Outbox::Wire w;
  w.post = [users](const void* data, size_t bytes, int peer, int tag) -> absl::StatusOr<void*> {
    auto req = std::make_unique<MPI_Request>(MPI_REQUEST_NULL);
    CallLock lock;
    RETURN_IF_ERROR(CheckMpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag & ~p2p::kUserTagBit, users,
                                       req.get()), "MPI_Isend", peer));
    return req.release();
  };
  w.test = [](void* handle) -> absl::StatusOr<bool> {
    auto* req = static_cast<MPI_Request*>(handle);
    int done = 0;
    {
      CallLock lock;
      RETURN_IF_ERROR(CheckMpi(MPI_Test(req, &done, MPI_STATUS_IGNORE), "MPI_Test"));
    }
    if (done) delete req;
    return done != 0;
  };
  w.drop = [](void* handle) {
    auto* req = static_cast<MPI_Request*>(handle);
    {
      CallLock lock;
      if (*req != MPI_REQUEST_NULL) MPI_Request_free(req);
    }
    delete req;
  };
  return w;
}

}  // namespace mpi
}  // namespace weft
