#include "comm/p2p/status_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "comm/bootstrap/net.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

using bootstrap::Endpoint;
using bootstrap::Fd;

constexpr uint32_t kMagic = 0x57465448;  // "WFTH"
// A peer on a live host answers within this; longer is "no answer", never "dead".
constexpr int kAnswerMs = 300;

struct Request {
  uint32_t magic = kMagic;
  uint32_t rank = 0;
  uint64_t key = 0;
};
struct Answer {
  uint32_t magic = kMagic;
  uint32_t found = 0;
  ProgressWords progress;
};
static_assert(sizeof(Request) == 16 && sizeof(Answer) == 72, "the wire sizes");

// What every rank tells the others at creation, all-gathered.
struct Contact {
  uint64_t key = 0;  // rank 0's is the communicator's
  int64_t pid = 0;
  sockaddr_storage addr{};
  uint64_t addr_len = 0;  // 0: this process has no listener
  char node[64] = {};
};

bool IsLoopback(const Contact& c) {
  if (c.addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&c.addr);
    return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
  }
  if (c.addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&c.addr);
    return IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) != 0;
  }
  return false;
}

// One per process, never destroyed: its thread may still be answering while
// the process exits, and it owns nothing a destructor would have to free.
class Server {
 public:
  static Server* Get() {
    static Server* const s = new Server();
    return s;
  }
  bool listening() const { return listening_; }
  const Endpoint& address() const { return address_; }
  void Add(uint64_t key, uint32_t rank, const ProgressWords* w) {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_[{key, rank}] = w;
  }
  // After this returns, the listener never reads the rank's words again.
  void Remove(uint64_t key, uint32_t rank) {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_.erase({key, rank});
  }

 private:
  Server() {
    absl::StatusOr<Endpoint> at = bootstrap::ChooseListenAddress();
    absl::StatusOr<Fd> fd = at.ok() ? bootstrap::Listen(*at, false) : absl::StatusOr<Fd>(at.status());
    absl::StatusOr<Endpoint> bound = fd.ok() ? bootstrap::LocalAddress(fd->get()) : absl::StatusOr<Endpoint>(fd.status());
    if (!bound.ok()) {
      Log(LogLevel::kWarn, "no hang-report channel in this process (its peers will not see its progress): %s",
          bound.status().message());
      return;
    }
    address_ = *bound;
    listening_ = true;
    Log(LogLevel::kInfo, "hang-report channel listening at %s", address_.ToString());
    std::thread([this, listener = std::move(*fd)]() { Serve(listener.get()); }).detach();
  }

  void Serve(int listener) {
    for (;;) {
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno != EINTR) return;
      Fd conn(accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!conn.valid()) continue;
      Request req;
      const auto deadline = bootstrap::After(kAnswerMs);
      if (!bootstrap::ReadAll(conn.get(), &req, sizeof(req), deadline, "a hang-report request").ok() ||
          req.magic != kMagic) {
        continue;  // a stranger on the port: dropped
      }
      Answer a;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = ranks_.find({req.key, req.rank});
        if (it != ranks_.end()) {
          a.found = 1;
          a.progress = ReadProgress(*it->second);
        }
      }
      static_cast<void>(bootstrap::WriteAll(conn.get(), &a, sizeof(a), deadline, "a hang-report answer"));
    }
  }

  bool listening_ = false;
  Endpoint address_;
  std::mutex mu_;
  std::map<std::pair<uint64_t, uint32_t>, const ProgressWords*> ranks_;
};

// Connects within kAnswerMs. errno-style result: 0, ECONNREFUSED, ETIMEDOUT, ...
int Connect(const Endpoint& to, Fd* out) {
  Fd fd(socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&to.addr), to.len) != 0) {
    if (errno != EINPROGRESS) return errno;
    pollfd p{fd.get(), POLLOUT, 0};
    const int n = poll(&p, 1, kAnswerMs);
    if (n == 0) return ETIMEDOUT;
    if (n < 0) return errno;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  *out = std::move(fd);
  return 0;
}

// The peers of one communicator, asked over their processes' listeners.
class TcpBoard final : public Board {
 public:
  TcpBoard(int rank, uint64_t key, std::vector<Contact> peers) : rank_(rank), key_(key), peers_(std::move(peers)) {}
  ~TcpBoard() override { Server::Get()->Remove(key_, static_cast<uint32_t>(rank_)); }

  PeerState Peer(int q) override {
    PeerState p;
    p.where = Where(q);
    const Contact& c = peers_[static_cast<size_t>(q)];
    if (c.addr_len == 0) {
      p.why = "its process has no hang-report channel";
      return p;
    }
    Fd fd;
    const int err = Connect(EndpointOf(c), &fd);
    if (err != 0) {
      p.kind = err == ECONNREFUSED ? PeerState::kDead : PeerState::kUnknown;
      p.why = Refusal(c, err);
      return p;
    }
    Request req;
    req.rank = static_cast<uint32_t>(q);
    req.key = key_;
    Answer a;
    const auto deadline = bootstrap::After(kAnswerMs);
    absl::Status s = bootstrap::WriteAll(fd.get(), &req, sizeof(req), deadline, "asking for its progress");
    if (s.ok()) s = bootstrap::ReadAll(fd.get(), &a, sizeof(a), deadline, "reading its progress");
    if (!s.ok() || a.magic != kMagic) {
      p.why = s.ok() ? std::string("a garbled answer") : std::string(s.message());
      return p;
    }
    p.kind = a.found != 0 ? PeerState::kKnown : PeerState::kGone;
    p.progress = a.progress;
    return p;
  }

  bool Dead(int q, std::string* why) override {
    const Contact& c = peers_[static_cast<size_t>(q)];
    if (c.addr_len == 0) return false;
    Fd fd;
    const int err = Connect(EndpointOf(c), &fd);
    if (err != ECONNREFUSED) return false;  // a timeout may be a slow or cut link, not a death
    *why = Refusal(c, err);
    return true;
  }

  std::string Where(int q) const override {
    const Contact& c = peers_[static_cast<size_t>(q)];
    return absl::StrFormat("pid %d on node %s", static_cast<int>(c.pid), c.node);
  }

 private:
  static Endpoint EndpointOf(const Contact& c) {
    Endpoint e;
    e.addr = c.addr;
    e.len = static_cast<socklen_t>(c.addr_len);
    return e;
  }
  static std::string Refusal(const Contact& c, int err) {
    if (err == ECONNREFUSED) {
      return absl::StrFormat("its node refused a connection to its hang-report channel at %s: the process has "
                             "exited", EndpointOf(c).ToString());
    }
    return absl::StrFormat("no connection to its hang-report channel at %s: %s", EndpointOf(c).ToString(),
                           std::strerror(err));
  }

  const int rank_;
  const uint64_t key_;
  const std::vector<Contact> peers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Board>> MakeTcpBoard(int rank, int size, const ProgressWords* mine,
                                                     AllGatherFn all_gather) {
  Server* server = Server::Get();
  Contact me;
  me.key = std::random_device{}() | static_cast<uint64_t>(std::random_device{}()) << 32;
  me.pid = getpid();
  if (server->listening()) {
    me.addr = server->address().addr;
    me.addr_len = server->address().len;
  }
  gethostname(me.node, sizeof(me.node) - 1);
  std::vector<Contact> all(static_cast<size_t>(size));
  RETURN_IF_ERROR(Annotate(all_gather(&me, all.data(), sizeof(Contact)), "exchanging hang-report channels"));
  const uint64_t key = all[0].key;
  for (Contact& c : all) {
    c.node[sizeof(c.node) - 1] = '\0';
    // A loopback address names this node's loopback, not the peer's: on
    // another node nobody listens there, and a refusal would read as a death.
    if (c.addr_len != 0 && IsLoopback(c) && std::strcmp(c.node, me.node) != 0) c.addr_len = 0;
  }
  server->Add(key, static_cast<uint32_t>(rank), mine);
  return std::unique_ptr<Board>(new TcpBoard(rank, key, std::move(all)));
}

}  // namespace p2p
}  // namespace weft
