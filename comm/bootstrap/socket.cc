#include "comm/bootstrap/socket.h"

#include <netinet/in.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "comm/bootstrap/net.h"
#include "comm/bootstrap/root.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace bootstrap {
namespace {

// The rank's own deadline runs this much past the root's, so that the root's
// account of a failure (which ranks are missing) arrives first.
constexpr int kGraceMs = 2000;

class SocketBootstrap final : public Bootstrap {
 public:
  SocketBootstrap(int rank, int size, Fd fd, UniqueId id, int timeout_ms)
      : Bootstrap(rank, size), fd_(std::move(fd)), id_(std::move(id)), timeout_ms_(timeout_ms) {}
  ~SocketBootstrap() override;
  absl::Status AllGather(const void* mine, void* all, size_t bytes) override;
  std::string Describe() const override { return "the bootstrap root at " + id_.root.ToString(); }

 private:
  absl::Status Exchange(const void* mine, void* all, size_t bytes);

  Fd fd_;
  const UniqueId id_;
  const int timeout_ms_;
  bool failed_ = false;
};

SocketBootstrap::~SocketBootstrap() {
  if (fd_.valid() && !failed_) {
    unsigned char bye[kFrameHeaderBytes];
    EncodeFrameHeader({FrameType::kBye, 0}, bye);
    (void)WriteAll(fd_.get(), bye, sizeof(bye), After(1000), "goodbye to the bootstrap root");
  }
  fd_ = Fd();
  // After a failure the root ends at once: join it, so a failed init leaves
  // no thread behind in the process that ran it.
  FinishRoot(id_.tag, failed_);
}

absl::Status SocketBootstrap::AllGather(const void* mine, void* all, size_t bytes) {
  if (failed_) return InvalidUsage("this bootstrap already failed");
  absl::Status s = Exchange(mine, all, bytes);
  if (!s.ok()) failed_ = true;
  return s;
}

absl::Status SocketBootstrap::Exchange(const void* mine, void* all, size_t bytes) {
  if (bytes > kMaxFrameBytes / static_cast<size_t>(size())) {
    return InternalError("a bootstrap all-gather of %d bytes per rank over %d ranks is too large", bytes, size());
  }
  const Deadline deadline = After(timeout_ms_ + kGraceMs);
  const std::string where = Describe();
  unsigned char header[kFrameHeaderBytes];
  EncodeFrameHeader({FrameType::kGather, static_cast<uint32_t>(bytes)}, header);
  absl::Status sent = WriteAll(fd_.get(), header, sizeof(header), deadline, "rank's block to " + where);
  if (sent.ok()) sent = WriteAll(fd_.get(), mine, bytes, deadline, "rank's block to " + where);
  // A root that failed the world said why before it closed: read that
  // rather than report the closed socket.
  absl::Status s = ReadAll(fd_.get(), header, sizeof(header), sent.ok() ? deadline : After(500),
                           "waiting for " + where);
  if (!sent.ok() && !s.ok()) return sent;
  if (absl::IsDeadlineExceeded(s)) {
    return Timeout("rank %d: no answer from %s within the bootstrap timeout of %d ms (the root itself may have "
                   "died)", rank(), where, timeout_ms_);
  }
  if (absl::IsUnavailable(s)) {
    return RemoteError("rank %d: %s closed the connection without a word (the process serving it exited?)", rank(),
                       where);
  }
  RETURN_IF_ERROR(s);
  ASSIGN_OR_RETURN(const FrameHeader h, DecodeFrameHeader(header));
  if (h.type == FrameType::kError) {
    std::string payload(h.length, '\0');
    RETURN_IF_ERROR(ReadAll(fd_.get(), payload.data(), payload.size(), deadline, "error from " + where));
    return DecodeError(payload);
  }
  const size_t want = bytes * static_cast<size_t>(size());
  if (h.type != FrameType::kGathered || h.length != want) {
    return SystemError("%s answered an all-gather of %d bytes with a frame of type %d and %d bytes", where, want,
                       static_cast<int>(h.type), h.length);
  }
  return ReadAll(fd_.get(), all, want, deadline, "all-gather result from " + where);
}

}  // namespace

uint64_t RandomTag() {
  std::random_device rd;
  uint64_t tag = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return tag == 0 ? 1 : tag;
}

absl::StatusOr<UniqueId> MakeUniqueId() {
  ASSIGN_OR_RETURN(Endpoint here, ChooseListenAddress());
  ASSIGN_OR_RETURN(Fd listener, Listen(here, false));
  UniqueId id;
  ASSIGN_OR_RETURN(id.root, LocalAddress(listener.get()));
  id.tag = RandomTag();
  RETURN_IF_ERROR(StartRoot(std::move(listener), id.root, id.tag, Env::Get().bootstrap_timeout_ms));
  Log(LogLevel::kInfo, "bootstrap: unique id with its root at %s", id.root.ToString());
  return id;
}

absl::Status ServeRoot(const Endpoint& root, uint64_t tag) {
  Endpoint any;
  if (root.family() == AF_INET6) {
    auto& a6 = reinterpret_cast<sockaddr_in6&>(any.addr);
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(static_cast<uint16_t>(root.port()));
    any.len = sizeof(sockaddr_in6);
  } else {
    auto& a4 = reinterpret_cast<sockaddr_in&>(any.addr);
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    a4.sin_port = htons(static_cast<uint16_t>(root.port()));
    any.len = sizeof(sockaddr_in);
  }
  ASSIGN_OR_RETURN(Fd listener, Listen(any, true));
  return StartRoot(std::move(listener), root, tag, Env::Get().bootstrap_timeout_ms);
}

absl::StatusOr<std::unique_ptr<Bootstrap>> JoinSocketWorld(const UniqueId& id, int nranks, int rank,
                                                           int timeout_ms) {
  if (nranks < 1) return InvalidArgument("nranks = %d must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) return InvalidArgument("rank = %d is outside [0, nranks = %d)", rank, nranks);
  if (timeout_ms <= 0) timeout_ms = Env::Get().bootstrap_timeout_ms;
  ASSIGN_OR_RETURN(Fd fd, ConnectWithRetry(id.root, After(timeout_ms)));
  unsigned char hello[kHelloBytes];
  EncodeHello({id.tag, nranks, rank, timeout_ms}, hello);
  RETURN_IF_ERROR(WriteAll(fd.get(), hello, sizeof(hello), After(timeout_ms), "hello to the bootstrap root"));
  Log(LogLevel::kInfo, "bootstrap: rank %d of %d joined the root at %s", rank, nranks, id.root.ToString());
  return std::unique_ptr<Bootstrap>(std::make_unique<SocketBootstrap>(rank, nranks, std::move(fd), id, timeout_ms));
}

}  // namespace bootstrap
}  // namespace weft
