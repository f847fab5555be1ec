#include "comm/p2p/status_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/bootstrap/net.h"
#include "comm/p2p/reach.h"
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
// Ranks of one node die together (a node's crash, a job step killed), but
// not in the same microsecond: when some are found dead, the others there
// are probed once more after this, so that one message names them all.
constexpr auto kSettle = std::chrono::milliseconds(100);
// A host silent this long when a peer is found dead is named as well, first.
constexpr auto kLongSilence = std::chrono::milliseconds(500);

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
  TcpBoard(int rank, uint64_t key, std::vector<Contact> peers)
      : rank_(rank), key_(key), peers_(std::move(peers)), silence_(peers_.size()) {}
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

  // Every peer at once (a wait's probes cost one poll, not one per peer).
  absl::Status Survey(int, int, int unreachable_ms, absl::FunctionRef<std::string()> report,
                      const std::string& here) override {
    std::lock_guard<std::mutex> lock(mu_);  // the collective's and the outbox's threads both wait
    // Silence counts from when the handshake was asked for.
    const auto asked = Silence::Clock::now();
    std::vector<Handshake> a = ConnectAll(Targets([](size_t) { return true; }), kAnswerMs);
    silence_.Record(asked, a);
    const auto now = Silence::Clock::now();
    std::vector<int> dead = Of(a, Handshake::kRefused);
    // Other hosts silent for a while (one slow handshake is not enough to
    // blame), and those silent for the window.
    std::vector<int> silent, lost;
    for (size_t q = 0; q < a.size(); ++q) {
      if (!IsSilence(a[q].kind) || SameNodeAsAny(q, {rank_})) continue;  // the same host: no network path
      if (silence_.Silent(q, now) >= kLongSilence) silent.push_back(static_cast<int>(q));
      if (unreachable_ms > 0 && silence_.Silent(q, now) >= std::chrono::milliseconds(unreachable_ms)) {
        lost.push_back(static_cast<int>(q));
      }
    }
    if (!dead.empty()) {
      bool elsewhere = false;
      for (int q : dead) elsewhere = elsewhere || !SameNodeAsAny(static_cast<size_t>(q), {rank_});
      if (elsewhere) std::this_thread::sleep_for(kSettle);
      const std::vector<Handshake> again = ConnectAll(Targets([&](size_t q) {
        // (Not this rank's own node: it is not all dead.)
        return a[q].kind == Handshake::kAccepted && SameNodeAsAny(q, dead) && !SameNodeAsAny(q, {rank_});
      }), kAnswerMs);
      for (size_t q = 0; q < a.size(); ++q) {
        if (again[q].kind == Handshake::kRefused) a[q] = again[q];
      }
      dead = Of(a, Handshake::kRefused);
      // A peer that gave up on a silent host (and exited) is found dead
      // before that host's window is up: the silence is the likelier cause,
      // so it comes first.
      if (!silent.empty() && unreachable_ms > 0) {
        return RemoteError("rank %d: %s; %s; this collective cannot complete (%s)", rank_,
                           SilenceText(silent, a, now, false), DeadText(dead), here);
      }
      return RemoteError("rank %d: %s; this collective cannot complete. %s", rank_, DeadText(dead), report());
    }
    if (lost.empty()) return absl::OkStatus();
    return RemoteError("rank %d: %s; this collective cannot complete (%s)", rank_, SilenceText(lost, a, now, true),
                       here);
  }

 private:
  // The endpoints of the peers `pick` chooses (others: length 0, skipped).
  template <typename Pick>
  std::vector<Endpoint> Targets(Pick pick) const {
    std::vector<Endpoint> to(peers_.size());
    for (size_t q = 0; q < peers_.size(); ++q) {
      if (static_cast<int>(q) != rank_ && peers_[q].addr_len != 0 && pick(q)) to[q] = EndpointOf(peers_[q]);
    }
    return to;
  }
  static std::vector<int> Of(const std::vector<Handshake>& a, Handshake::Kind k) {
    std::vector<int> out;
    for (size_t q = 0; q < a.size(); ++q) {
      if (a[q].kind == k) out.push_back(static_cast<int>(q));
    }
    return out;
  }
  bool SameNodeAsAny(size_t q, const std::vector<int>& ranks) const {
    for (int r : ranks) {
      if (std::strcmp(peers_[q].node, peers_[static_cast<size_t>(r)].node) == 0) return true;
    }
    return false;
  }
  // The nodes of `ranks`, in order of their first rank there.
  std::vector<std::string> Nodes(const std::vector<int>& ranks) const {
    std::vector<std::string> nodes;
    for (int r : ranks) {
      const std::string n = peers_[static_cast<size_t>(r)].node;
      if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
    }
    return nodes;
  }
  // Every rank of this board on `node`.
  std::vector<int> RanksOn(const std::string& node) const {
    std::vector<int> out;
    for (size_t q = 0; q < peers_.size(); ++q) {
      if (node == peers_[q].node) out.push_back(static_cast<int>(q));
    }
    return out;
  }
  // "node h1 (ranks 2, 3) is" / "nodes h1 (ranks 2, 3), h3 (rank 5) are":
  // each node of `ranks` with all of its ranks.
  std::string NodesText(const std::vector<int>& ranks, bool verb = true) const {
    const std::vector<std::string> nodes = Nodes(ranks);
    std::string s = nodes.size() == 1 ? "node " : "nodes ";
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::vector<int> on = RanksOn(nodes[i]);
      absl::StrAppend(&s, i == 0 ? "" : ", ", nodes[i], " (", on.size() == 1 ? "rank " : "ranks ", RankList(on), ")");
    }
    if (verb) absl::StrAppend(&s, nodes.size() == 1 ? " is" : " are");
    return s;
  }
  // "node h1 (ranks 2, 3) is unreachable: ..." (`lost`: silent for the
  // window) or "... has not answered a TCP handshake for 1900 ms ...".
  std::string SilenceText(const std::vector<int>& ranks, const std::vector<Handshake>& a,
                          Silence::Clock::time_point now, bool lost) const {
    const size_t first = static_cast<size_t>(ranks[0]);
    const int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(silence_.Silent(first, now)).count());
    const bool one = Nodes(ranks).size() == 1;
    std::string text =
        lost ? absl::StrFormat("%s unreachable: no TCP handshake with %s for %d ms", NodesText(ranks),
                               one ? "its host" : "their hosts", ms)
             : absl::StrFormat("%s not answered a TCP handshake for %d ms", NodesText(ranks, false) + (one ? " has" : " have"),
                               ms);
    absl::StrAppend(&text, " (the first: ", EndpointOf(peers_[first]).ToString(), ": ",
                    std::strerror(silence_.FirstErr(first)), ")");
    bool no_route = true;
    for (int q : ranks) no_route = no_route && a[static_cast<size_t>(q)].kind == Handshake::kNoRoute;
    if (no_route) {
      absl::StrAppend(&text, "; this host has no route to ", one ? "it" : "them", ": this node, ",
                      NodesText({rank_}, false), ", has lost its own link");
    }
    return text;
  }
  // The dead ranks, a node whose every rank is dead as one.
  std::string DeadText(const std::vector<int>& dead) const {
    std::string s;
    for (const std::string& node : Nodes(dead)) {
      std::vector<int> here;
      for (int r : dead) {
        if (node == peers_[static_cast<size_t>(r)].node) here.push_back(r);
      }
      if (!s.empty()) absl::StrAppend(&s, "; ");
      if (here == RanksOn(node)) {
        std::string list;
        for (int r : here) absl::StrAppend(&list, list.empty() ? "" : ", ", peers_[static_cast<size_t>(r)].pid);
        absl::StrAppend(&s, here.size() == 1 ? "the process of " : "every process of ", NodesText(here, false),
                        " is dead (", here.size() == 1 ? "pid " : "pids ", list,
                        "; that node refused connections to the hang-report channel: the process has exited)");
        continue;
      }
      for (int r : here) {
        absl::StrAppend(&s, r == here[0] ? "" : "; ", absl::StrFormat("rank %d (%s) is dead (%s)", r, Where(r),
                                                                       Refusal(peers_[static_cast<size_t>(r)],
                                                                               ECONNREFUSED)));
      }
    }
    return s;
  }

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
  std::mutex mu_;
  Silence silence_;
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
