#include "comm/bootstrap/root.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace bootstrap {
namespace {

// Connections that have not said hello yet, at most, and how long they may
// take: a port scanner or a stray client cannot hold the root.
constexpr size_t kMaxStrangers = 64;
constexpr int kHelloMs = 10000;
// How long the root tries to deliver its last word to a rank.
constexpr int kFarewellMs = 1000;

struct Conn {
  Fd fd;
  std::string peer;
  std::string in;  // bytes read, not yet parsed
  int rank = -1;   // -1 until its hello was accepted
  bool bye = false;
  bool has_block = false;
  std::string block;  // its block of the all-gather in progress
  Deadline hello_by;
};

class Root {
 public:
  Root(Fd listener, Endpoint at, uint64_t tag, int idle_ms)
      : listener_(std::move(listener)), at_(std::move(at)), tag_(tag), deadline_(After(idle_ms)) {}
  void Run();

 private:
  // Handles what `c` sent; false once the root is done (failed or finished).
  bool Parse(Conn& c);
  bool Hello(Conn& c);
  bool Frame(Conn& c, FrameType type, std::string payload);
  bool Answer();
  void Fail(const absl::Status& s);
  // After Fail has told every rank: waits for them to close (bounded by d).
  void Farewell(Deadline d);
  std::string Missing() const;
  std::string Who(const Conn& c) const { return absl::StrFormat("rank %d (from %s)", c.rank, c.peer); }

  Fd listener_;
  const Endpoint at_;
  const uint64_t tag_;
  Deadline deadline_;
  int timeout_ms_ = 0;
  int nranks_ = -1;  // from the first accepted hello
  std::string nranks_from_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> by_rank_;
  int joined_ = 0, blocks_ = 0, byes_ = 0;
  bool done_ = false;
};

std::string PeerName(int fd) {
  Endpoint e;
  e.len = sizeof(e.addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&e.addr), &e.len) != 0) return "an unknown peer";
  return e.ToString();
}

std::string Root::Missing() const {
  std::vector<int> missing;
  for (int r = 0; r < nranks_; ++r) {
    if (by_rank_[static_cast<size_t>(r)] == nullptr) missing.push_back(r);
  }
  if (missing.size() > 32) {
    return absl::StrFormat("%s and %d more", absl::StrJoin(missing.begin(), missing.begin() + 32, ", "),
                           missing.size() - 32);
  }
  return absl::StrJoin(missing, ", ");
}

void Root::Fail(const absl::Status& s) {
  const absl::Status told = Annotate(s, absl::StrFormat("weft bootstrap at %s", at_.ToString()));
  Log(LogLevel::kInfo, "%s", told.message());
  const std::string payload = EncodeError(told);
  unsigned char header[kFrameHeaderBytes];
  EncodeFrameHeader({FrameType::kError, static_cast<uint32_t>(payload.size())}, header);
  const Deadline d = After(kFarewellMs);
  // Connections that have not said hello yet are told too: they are likely
  // ranks whose hello is on its way (the message carries no secret).
  for (auto& c : conns_) {
    if (c->bye || !c->fd.valid()) continue;
    if (WriteAll(c->fd.get(), header, sizeof(header), d, "error to a rank").ok()) {
      (void)WriteAll(c->fd.get(), payload.data(), payload.size(), d, "error to a rank");
    }
  }
  Farewell(d);
  conns_.clear();
  done_ = true;
}

void Root::Farewell(Deadline d) {
  // Closing a socket whose input is unread resets the connection, and the
  // reset can discard the error before its rank reads it: half-close each,
  // then drop what the ranks still send until they close (having read the
  // error) or the deadline passes.
  std::vector<pollfd> open;
  for (auto& c : conns_) {
    if (!c->fd.valid()) continue;
    shutdown(c->fd.get(), SHUT_WR);
    open.push_back({c->fd.get(), POLLIN, 0});
  }
  char sink[4096];
  while (!open.empty()) {
    const int left = MsLeft(d);
    if (left <= 0 || poll(open.data(), open.size(), left) <= 0) break;
    for (size_t i = 0; i < open.size();) {
      const ssize_t r = open[i].revents != 0 ? recv(open[i].fd, sink, sizeof(sink), MSG_DONTWAIT) : 1;
      const bool again = r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
      if (r > 0 || again) {
        open[i++].revents = 0;
      } else {
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));  // closed or reset: done with it
      }
    }
  }
}

bool Root::Hello(Conn& c) {
  unsigned char raw[kHelloBytes];
  std::memcpy(raw, c.in.data(), kHelloBytes);
  c.in.erase(0, kHelloBytes);
  absl::StatusOr<bootstrap::Hello> h = DecodeHello(raw);
  if (!h.ok() || h->tag != tag_) {
    // Not this world's: another job's rank, an old id, a scanner. Dropped
    // quietly, and the world goes on forming.
    Log(LogLevel::kInfo, "weft bootstrap at %s: dropped a connection from %s: %s", at_.ToString(), c.peer,
        h.ok() ? "it presented another job's tag" : std::string(h.status().message()));
    c.fd = Fd();
    return true;
  }
  if (h->nranks < 1) {
    Fail(InvalidUsage("a rank from %s joined with nranks = %d", c.peer, h->nranks));
    return false;
  }
  if (nranks_ < 0) {
    nranks_ = h->nranks;
    nranks_from_ = absl::StrFormat("rank %d (from %s)", h->rank, c.peer);
    by_rank_.assign(static_cast<size_t>(nranks_), nullptr);
    timeout_ms_ = h->timeout_ms > 0 ? h->timeout_ms : Env::Get().bootstrap_timeout_ms;
    deadline_ = After(timeout_ms_);
  }
  if (h->nranks != nranks_) {
    Fail(InvalidUsage("rank %d (from %s) joined a world of nranks = %d, but %s joined one of %d", h->rank, c.peer,
                      h->nranks, nranks_from_, nranks_));
    return false;
  }
  if (h->rank < 0 || h->rank >= nranks_) {
    Fail(InvalidUsage("a rank from %s joined as rank %d, outside [0, %d)", c.peer, h->rank, nranks_));
    return false;
  }
  if (Conn* other = by_rank_[static_cast<size_t>(h->rank)]; other != nullptr) {
    Fail(InvalidUsage("rank %d joined twice: from %s and from %s", h->rank, other->peer, c.peer));
    return false;
  }
  c.rank = h->rank;
  by_rank_[static_cast<size_t>(c.rank)] = &c;
  if (++joined_ == nranks_) listener_ = Fd();  // every rank is here: stop listening
  return true;
}

bool Root::Answer() {
  const size_t bytes = by_rank_[0]->block.size();
  for (int r = 1; r < nranks_; ++r) {
    const Conn& c = *by_rank_[static_cast<size_t>(r)];
    if (c.block.size() != bytes) {
      Fail(InvalidUsage("the ranks passed different sizes to one bootstrap all-gather: rank 0 %d bytes, rank %d %d "
                        "bytes (do they run the same weft, and the same backend and memory kind?)",
                        bytes, r, c.block.size()));
      return false;
    }
  }
  if (bytes * static_cast<size_t>(nranks_) > kMaxFrameBytes) {
    Fail(InvalidUsage("a bootstrap all-gather of %d bytes from each of %d ranks is more than %d", bytes, nranks_,
                      kMaxFrameBytes));
    return false;
  }
  std::string out(kFrameHeaderBytes, '\0');
  EncodeFrameHeader({FrameType::kGathered, static_cast<uint32_t>(bytes * static_cast<size_t>(nranks_))},
                    reinterpret_cast<unsigned char*>(out.data()));
  for (Conn* c : by_rank_) {
    out += c->block;
    c->block.clear();
    c->has_block = false;
  }
  blocks_ = 0;
  for (Conn* c : by_rank_) {
    absl::Status s = WriteAll(c->fd.get(), out.data(), out.size(), deadline_, "all-gather result");
    if (!s.ok()) {
      Fail(RemoteError("could not send the all-gather's result to %s: %s", Who(*c), s.message()));
      return false;
    }
  }
  return true;
}

bool Root::Frame(Conn& c, FrameType type, std::string payload) {
  switch (type) {
    case FrameType::kGather:
      if (c.has_block || c.bye) {
        Fail(InvalidUsage("%s sent a second all-gather block before the first was answered", Who(c)));
        return false;
      }
      if (byes_ > 0) {
        for (Conn* o : by_rank_) {
          if (o->bye) {
            Fail(RemoteError("rank %d left the bootstrap before the world formed, while rank %d was still setting "
                             "up: its init failed there (see its error)", o->rank, c.rank));
            return false;
          }
        }
      }
      c.block = std::move(payload);
      c.has_block = true;
      if (++blocks_ == nranks_) return Answer();
      return true;
    case FrameType::kBye:
      c.bye = true;
      ++byes_;
      if (blocks_ > 0) {
        Fail(RemoteError("rank %d left the bootstrap before the world formed, while other ranks waited for it: its "
                         "init failed there (see its error)", c.rank));
        return false;
      }
      if (byes_ == nranks_) done_ = true;
      return !done_;
    default:
      Fail(InvalidUsage("%s sent a frame of type %d, which ranks never send", Who(c), static_cast<int>(type)));
      return false;
  }
}

bool Root::Parse(Conn& c) {
  if (c.rank < 0) {
    if (c.in.size() < kHelloBytes) return true;
    if (!Hello(c)) return false;
    if (c.rank < 0) return true;  // dropped
  }
  while (c.in.size() >= kFrameHeaderBytes) {
    absl::StatusOr<FrameHeader> h = DecodeFrameHeader(reinterpret_cast<const unsigned char*>(c.in.data()));
    if (!h.ok()) {
      Fail(InvalidUsage("%s sent a malformed bootstrap frame: %s", Who(c), h.status().message()));
      return false;
    }
    if (c.in.size() < kFrameHeaderBytes + h->length) return true;
    std::string payload = c.in.substr(kFrameHeaderBytes, h->length);
    c.in.erase(0, kFrameHeaderBytes + h->length);
    if (!Frame(c, h->type, std::move(payload))) return false;
  }
  return true;
}

void Root::Run() {
  char buf[1 << 16];
  while (!done_) {
    if (Clock::now() >= deadline_) {
      if (nranks_ < 0) break;  // nobody ever came: nobody to tell
      if (joined_ < nranks_) {
        Fail(Timeout("%d of %d ranks joined within the bootstrap timeout of %d ms; missing rank(s): %s", joined_,
                     nranks_, timeout_ms_, Missing()));
      } else if (blocks_ > 0) {
        std::vector<int> late;
        for (Conn* c : by_rank_) {
          if (!c->has_block) late.push_back(c->rank);
        }
        Fail(Timeout("every rank joined, but rank(s) %s did not reach the bootstrap's next step within %d ms",
                     absl::StrJoin(late, ", "), timeout_ms_));
      }
      break;  // the world formed; a rank still connected finds out by itself
    }
    std::vector<pollfd> fds;
    if (listener_.valid()) fds.push_back({listener_.get(), POLLIN, 0});
    for (auto& c : conns_) fds.push_back({c->fd.get(), POLLIN, 0});
    const int rc = poll(fds.data(), fds.size(), std::max(1, std::min(MsLeft(deadline_), 500)));
    if (rc < 0 && errno != EINTR) {
      Fail(SystemError("poll: %s", std::strerror(errno)));
      break;
    }
    size_t k = 0;
    if (listener_.valid()) {
      if (fds[k++].revents & POLLIN) {
        for (;;) {
          Fd fd(accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
          if (!fd.valid()) break;
          const size_t strangers =
              std::count_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->rank < 0; });
          if (strangers >= kMaxStrangers) continue;  // closed by Fd
          auto c = std::make_unique<Conn>();
          c->peer = PeerName(fd.get());
          c->fd = std::move(fd);
          c->hello_by = After(kHelloMs);
          conns_.push_back(std::move(c));
        }
      }
    }
    const size_t polled = fds.size() - k;
    for (size_t i = 0; i < polled && !done_; ++i) {
      Conn& c = *conns_[i];
      if (!c.fd.valid() || (fds[k + i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t r = recv(c.fd.get(), buf, sizeof(buf), 0);
      if (r > 0) {
        c.in.append(buf, static_cast<size_t>(r));
        if (!Parse(c)) break;
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      // Closed (or reset).
      if (c.rank >= 0 && !c.bye) {
        Fail(RemoteError("%s closed its bootstrap connection before the world formed: did it exit or crash?",
                         Who(c)));
        break;
      }
      c.fd = Fd();
    }
    if (done_) break;
    // Strangers that did not say hello in time, and closed connections, go.
    const Deadline now = Clock::now();
    for (auto& c : conns_) {
      if (c->rank < 0 && c->fd.valid() && now >= c->hello_by) c->fd = Fd();
    }
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                [](const auto& c) { return !c->fd.valid() && c->rank < 0; }),
                 conns_.end());
  }
}

struct Running {
  std::thread thread;
  std::shared_ptr<std::atomic<bool>> finished;
};

struct Roots {
  std::mutex mu;
  std::map<uint64_t, Running> running;
};

// Never destroyed: a root may still run when static destructors do.
Roots& GetRoots() {
  static auto* r = new Roots();
  return *r;
}

}  // namespace

absl::Status StartRoot(Fd listener, const Endpoint& advertised, uint64_t tag, int idle_timeout_ms) {
  Roots& roots = GetRoots();
  std::vector<std::thread> reaped;
  std::lock_guard<std::mutex> lock(roots.mu);
  for (auto it = roots.running.begin(); it != roots.running.end();) {
    if (it->second.finished->load()) {
      reaped.push_back(std::move(it->second.thread));
      it = roots.running.erase(it);
    } else {
      ++it;
    }
  }
  for (std::thread& t : reaped) t.join();  // finished: returns at once
  if (roots.running.count(tag) != 0) return InternalError("a bootstrap root with tag %x already runs here", tag);
  auto finished = std::make_shared<std::atomic<bool>>(false);
  auto root = std::make_shared<Root>(std::move(listener), advertised, tag, idle_timeout_ms);
  Running r;
  r.finished = finished;
  r.thread = std::thread([root, finished] {
    root->Run();
    finished->store(true);
  });
  roots.running.emplace(tag, std::move(r));
  return absl::OkStatus();
}

void FinishRoot(uint64_t tag, bool wait) {
  if (!wait) return;
  Roots& roots = GetRoots();
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(roots.mu);
    auto it = roots.running.find(tag);
    if (it == roots.running.end()) return;
    t = std::move(it->second.thread);
    roots.running.erase(it);
  }
  if (t.joinable()) t.join();
}

int RunningRoots() {
  Roots& roots = GetRoots();
  std::lock_guard<std::mutex> lock(roots.mu);
  int n = 0;
  for (const auto& [tag, r] : roots.running) n += r.finished->load() ? 0 : 1;
  return n;
}

}  // namespace bootstrap
}  // namespace weft
