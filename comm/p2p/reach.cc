#include "comm/p2p/reach.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "comm/bootstrap/net.h"

namespace weft {
namespace p2p {
namespace {

Handshake Of(int err) {
  Handshake a;
  a.err = err;
  switch (err) {
    case 0: a.kind = Handshake::kAccepted; break;
    case ECONNREFUSED: a.kind = Handshake::kRefused; break;
    case ENETUNREACH:
    case ENETDOWN: a.kind = Handshake::kNoRoute; break;
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case EHOSTDOWN: a.kind = Handshake::kSilent; break;
    default: a.kind = Handshake::kFailed; break;
  }
  return a;
}

}  // namespace

std::vector<Handshake> ConnectAll(const std::vector<bootstrap::Endpoint>& to, int within_ms) {
  std::vector<Handshake> out(to.size());
  std::vector<bootstrap::Fd> fds(to.size());
  std::vector<pollfd> waiting;
  std::vector<size_t> which;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i].len == 0) continue;
    bootstrap::Fd fd(socket(to[i].family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      out[i] = Handshake{Handshake::kFailed, errno};
      continue;
    }
    if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&to[i].addr), to[i].len) == 0) {
      out[i] = Of(0);
      continue;
    }
    if (errno != EINPROGRESS) {
      out[i] = Of(errno);
      continue;
    }
    waiting.push_back({fd.get(), POLLOUT, 0});
    which.push_back(i);
    fds[i] = std::move(fd);
  }
  const bootstrap::Deadline deadline = bootstrap::After(within_ms);
  size_t open = waiting.size();
  while (open > 0) {
    const int n = poll(waiting.data(), waiting.size(), bootstrap::MsLeft(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the time is up (or poll failed): what is left is silent
    for (size_t k = 0; k < waiting.size(); ++k) {
      if (waiting[k].fd < 0 || waiting[k].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof(err);
      if (getsockopt(waiting[k].fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      out[which[k]] = Of(err);
      waiting[k].fd = -1;  // poll ignores it from now on
      --open;
    }
  }
  for (size_t k = 0; k < waiting.size(); ++k) {
    if (waiting[k].fd >= 0) out[which[k]] = Of(ETIMEDOUT);
  }
  return out;
}

void Silence::Record(Clock::time_point now, const std::vector<Handshake>& shakes) {
  const bool fresh = last_ == Clock::time_point{} || now - last_ > kMaxGap;
  last_ = now;
  for (size_t q = 0; q < since_.size() && q < shakes.size(); ++q) {
    if (fresh || !IsSilence(shakes[q].kind)) {
      since_[q] = Clock::time_point{};
      first_err_[q] = 0;
    }
    if (IsSilence(shakes[q].kind) && since_[q] == Clock::time_point{}) {
      since_[q] = now;
      first_err_[q] = shakes[q].err;
    }
  }
}

Silence::Clock::duration Silence::Silent(size_t q, Clock::time_point now) const {
  if (since_[q] == Clock::time_point{}) return Clock::duration::zero();
  return now - since_[q];
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) absl::StrAppend(&s, s.empty() ? "" : ", ", r);
  return s;
}

}  // namespace p2p
}  // namespace weft
