#include "comm/bootstrap/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_split.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace bootstrap {

Deadline After(int timeout_ms) { return Clock::now() + std::chrono::milliseconds(timeout_ms); }

int MsLeft(Deadline d) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

int Fd::release() {
  const int f = fd_;
  fd_ = -1;
  return f;
}

std::vector<Interface> UpInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    Interface it;
    it.name = i->ifa_name;
    it.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    if (family == AF_INET) {
      std::memcpy(&it.address.addr, i->ifa_addr, sizeof(sockaddr_in));
      it.address.len = sizeof(sockaddr_in);
    } else {
      const auto* a6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      // Link-local addresses need a scope on every peer: only as a last resort.
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
      std::memcpy(&it.address.addr, a6, sizeof(sockaddr_in6));
      it.address.len = sizeof(sockaddr_in6);
    }
    out.push_back(it);
  }
  freeifaddrs(list);
  return out;
}

bool MatchesIfname(const std::string& spec_in, const std::string& name) {
  std::string spec = spec_in;
  if (spec.empty()) return true;
  bool exclude = false, exact = false;
  if (spec[0] == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  bool hit = false;
  for (absl::string_view p : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const std::string pat(p);
    if (exact ? name == pat : name.compare(0, pat.size(), pat) == 0) hit = true;
  }
  return exclude ? !hit : hit;
}

absl::StatusOr<Endpoint> ChooseListenAddress() {
  const Env& env = Env::Get();
  std::vector<Interface> all = UpInterfaces();
  auto family_ok = [&](const Interface& i) { return env.socket_family == 0 || i.address.family() == env.socket_family; };
  // IPv4 before IPv6 within each pass, as peers are likelier to reach it.
  std::stable_sort(all.begin(), all.end(),
                   [](const Interface& a, const Interface& b) { return a.address.family() < b.address.family(); });
  if (!env.socket_ifname.empty()) {
    for (const Interface& i : all) {
      if (family_ok(i) && MatchesIfname(env.socket_ifname, i.name)) return i.address;
    }
    std::string names;
    for (const Interface& i : all) names += (names.empty() ? "" : ", ") + i.name;
    return InvalidArgument("WEFT_SOCKET_IFNAME=%s matches no interface that is up (have: %s)", env.socket_ifname,
                           names);
  }
  for (const Interface& i : all) {
    if (family_ok(i) && !i.loopback && !MatchesIfname("docker,veth", i.name)) return i.address;
  }
  for (const Interface& i : all) {
    if (family_ok(i) && i.loopback) return i.address;
  }
  return SystemError("no network interface is up (not even loopback) to serve the bootstrap on");
}

absl::StatusOr<Endpoint> Resolve(const std::string& host_in, int port) {
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) return InvalidArgument("an empty host name");
  if (port <= 0 || port > 65535) return InvalidArgument("port %d is outside 1..65535", port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = Env::Get().socket_family != 0 ? Env::Get().socket_family : AF_UNSPEC;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) return SystemError("cannot resolve host '%s': %s", host, gai_strerror(rc));
  Endpoint e;
  // IPv4 first when a name has both, as ChooseListenAddress prefers.
  for (int want : {AF_INET, AF_INET6}) {
    for (addrinfo* a = res; a != nullptr && e.len == 0; a = a->ai_next) {
      if (a->ai_family != want) continue;
      std::memcpy(&e.addr, a->ai_addr, a->ai_addrlen);
      e.len = a->ai_addrlen;
    }
  }
  freeaddrinfo(res);
  if (e.len == 0) return SystemError("host '%s' has no IPv4 or IPv6 address", host);
  return e;
}

absl::Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return SystemError("fcntl(O_NONBLOCK): %s", std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::StatusOr<Fd> Listen(const Endpoint& at, bool reuse) {
  Fd fd(socket(at.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return SystemError("socket(): %s", std::strerror(errno));
  if (reuse) {
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  }
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&at.addr), at.len) != 0) {
    return SystemError("cannot listen at %s: bind: %s", at.ToString(), std::strerror(errno));
  }
  if (listen(fd.get(), 1024) != 0) return SystemError("listen at %s: %s", at.ToString(), std::strerror(errno));
  RETURN_IF_ERROR(SetNonBlocking(fd.get()));
  return fd;
}

absl::StatusOr<Endpoint> LocalAddress(int fd) {
  Endpoint e;
  e.len = sizeof(e.addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&e.addr), &e.len) != 0) {
    return SystemError("getsockname: %s", std::strerror(errno));
  }
  return e;
}

namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status PollOne(int fd, short events, Deadline deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int left = MsLeft(deadline);
    const int rc = poll(&p, 1, left);
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) return Timeout("%s: nothing moved before the bootstrap's deadline", what);
    if (errno != EINTR) return SystemError("%s: poll: %s", what, std::strerror(errno));
  }
}

}  // namespace

absl::StatusOr<Fd> ConnectWithRetry(const Endpoint& to, Deadline deadline) {
  std::chrono::milliseconds pause(10);
  std::string last = "no attempt";
  for (;;) {
    Fd fd(socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return SystemError("socket(): %s", std::strerror(errno));
    RETURN_IF_ERROR(SetNonBlocking(fd.get()));
    int rc = connect(fd.get(), reinterpret_cast<const sockaddr*>(&to.addr), to.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      const int n = poll(&p, 1, std::max(1, std::min(MsLeft(deadline), 1000)));
      socklen_t len = sizeof(err);
      if (n > 0) {
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err == 0) {
      const int one = 1;
      setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    last = std::strerror(err);
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != ENETUNREACH && err != EHOSTUNREACH &&
        err != ECONNRESET && err != EAGAIN) {
      return SystemError("cannot connect to the bootstrap root at %s: %s", to.ToString(), last);
    }
    if (Clock::now() + pause >= deadline) {
      return Timeout("could not reach the bootstrap root at %s before the bootstrap timeout (last attempt: %s); "
                     "is rank 0 (or the process that made the unique id) running, and is that address reachable "
                     "from here?", to.ToString(), last);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

absl::Status WriteAll(int fd, const void* data, size_t n, Deadline deadline, const std::string& what) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      RETURN_IF_ERROR(PollOne(fd, POLLOUT, deadline, what));
      continue;
    }
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) return RemoteError("%s: the peer closed the connection", what);
    return SystemError("%s: send: %s", what, std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, void* data, size_t n, Deadline deadline, const std::string& what) {
  auto* p = static_cast<unsigned char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return RemoteError("%s: the peer closed the connection", what);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      RETURN_IF_ERROR(PollOne(fd, POLLIN, deadline, what));
      continue;
    }
    if (errno == ECONNRESET) return RemoteError("%s: the peer reset the connection", what);
    return SystemError("%s: recv: %s", what, std::strerror(errno));
  }
  return absl::OkStatus();
}

}  // namespace bootstrap
}  // namespace weft
