#include "bench/check/beat_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace weft_check {

namespace {

constexpr char kScheme[] = "tcp:";

// This host's IPv4 addresses, loopback last: a peer on another node reaches
// one of the others, a peer on this node any.
std::vector<std::string> LocalAddresses() {
  std::vector<std::string> out, loop;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
      (std::strncmp(text, "127.", 4) == 0 ? loop : out).push_back(text);
    }
    freeifaddrs(list);
  }
  out.insert(out.end(), loop.begin(), loop.end());
  if (out.empty()) out.push_back("127.0.0.1");
  return out;
}

// A connection to ip:port within timeout_ms, or -1.
int Dial(const std::string& ip, int port, int timeout_ms) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof(err);
  if (poll(&p, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

bool IsBeatAddress(const std::string& s) { return s.rfind(kScheme, 0) == 0; }

absl::StatusOr<std::unique_ptr<BeatServer>> BeatServer::Start() {
  std::unique_ptr<BeatServer> s(new BeatServer);
  s->listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(a);
  if (s->listener_ < 0 || bind(s->listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(s->listener_, 1024) != 0 || getsockname(s->listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      pipe2(s->wake_, O_CLOEXEC) != 0) {
    return weft::SystemError("the heartbeat's TCP listener on rank 0: %s (pass --heartbeat DIR on a filesystem every "
                             "node shares instead)", std::strerror(errno));
  }
  s->address_ = absl::StrCat(kScheme, absl::StrJoin(LocalAddresses(), ","), ":", ntohs(a.sin_port));
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

BeatServer::~BeatServer() {
  if (thread_.joinable()) {
    const char c = 0;
    (void)!write(wake_[1], &c, 1);
    thread_.join();
  }
  for (int fd : {listener_, wake_[0], wake_[1]}) {
    if (fd >= 0) close(fd);
  }
}

// Reads lines from every connection; a rank's latest complete line is kept.
void BeatServer::Loop() {
  std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
  std::vector<std::string> pending = {"", ""};  // each connection's partial line
  char buf[4096];
  for (;;) {
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) {
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        fds.push_back({fd, POLLIN, 0});
        pending.emplace_back();
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {  // the rank is gone: its last line stays
        close(fds[i].fd);
        fds.erase(fds.begin() + static_cast<long>(i));
        pending.erase(pending.begin() + static_cast<long>(i));
        --i;
        continue;
      }
      pending[i].append(buf, static_cast<size_t>(n));
      for (size_t end; (end = pending[i].find('\n')) != std::string::npos;) {
        const std::string line = pending[i].substr(0, end);
        pending[i].erase(0, end + 1);
        int rank = -1;
        if (!absl::SimpleAtoi(line.substr(0, line.find('\t')), &rank) || rank < 0) continue;
        std::lock_guard<std::mutex> lock(mu_);
        lines_[rank] = line;
      }
    }
  }
  for (size_t i = 2; i < fds.size(); ++i) close(fds[i].fd);
}

std::vector<Beat> BeatServer::Beats(int nranks) const {
  std::vector<Beat> out(nranks);
  std::lock_guard<std::mutex> lock(mu_);
  for (int r = 0; r < nranks; ++r) {
    out[r].rank = r;
    const auto it = lines_.find(r);
    if (it != lines_.end()) ParseBeat(it->second, r, &out[r]);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<BeatLink>> BeatLink::Connect(const std::string& address, int timeout_ms) {
  const std::string rest = address.substr(sizeof(kScheme) - 1);
  const size_t colon = rest.rfind(':');
  int port = 0;
  if (!IsBeatAddress(address) || colon == std::string::npos || !absl::SimpleAtoi(rest.substr(colon + 1), &port)) {
    return weft::InvalidArgument("rank 0's heartbeat address '%s' does not parse", address);
  }
  for (const std::string& ip : std::vector<std::string>(absl::StrSplit(rest.substr(0, colon), ','))) {
    const int fd = Dial(ip, port, timeout_ms);
    if (fd < 0) continue;
    std::unique_ptr<BeatLink> link(new BeatLink);
    link->fd_ = fd;
    return link;
  }
  return weft::SystemError("cannot reach rank 0's heartbeat at %s (pass --heartbeat DIR on a filesystem every node "
                           "shares instead)", address);
}

BeatLink::~BeatLink() {
  if (fd_ >= 0) close(fd_);
}

void BeatLink::Send(const std::string& line) {
  if (fd_ < 0) return;
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = send(fd_, line.data() + done, line.size() - done, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd_);
      fd_ = -1;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace weft_check
