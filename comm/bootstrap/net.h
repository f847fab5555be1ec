// Sockets for the bootstrap: choosing the interface a root listens on (as
// NCCL chooses one), resolving a root's name, and reads and writes that end
// at a deadline instead of blocking for ever.
//
//   ASSIGN_OR_RETURN(Endpoint here, ChooseListenAddress());
//   ASSIGN_OR_RETURN(Fd listener, Listen(here));
//   RETURN_IF_ERROR(WriteAll(fd.get(), bytes, n, deadline, "hello to the root"));
#ifndef WEFT_COMM_BOOTSTRAP_NET_H_
#define WEFT_COMM_BOOTSTRAP_NET_H_

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/bootstrap/wire.h"

namespace weft {
namespace bootstrap {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
Deadline After(int timeout_ms);
// Milliseconds left, at least 0.
int MsLeft(Deadline d);

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  int get() const { return fd_; }
  int release();
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// One address of an interface that is up.
struct Interface {
  std::string name;
  Endpoint address;  // port 0
  bool loopback = false;
};
std::vector<Interface> UpInterfaces();

// NCCL_SOCKET_IFNAME's rule: `spec` is a comma-separated list of name
// prefixes; a leading '^' excludes those instead, a leading '=' makes them
// exact names (both may appear: "^=docker0"). An empty spec matches all.
bool MatchesIfname(const std::string& spec, const std::string& name);

// The address a bootstrap root listens on: WEFT_SOCKET_IFNAME's first match
// (and WEFT_SOCKET_FAMILY's family) when set; else the first interface that
// is neither loopback nor a docker bridge ("docker*", "veth*" excluded too);
// else loopback. InvalidArgument when the setting matches nothing.
absl::StatusOr<Endpoint> ChooseListenAddress();

// host (a name or a literal, IPv6 with or without brackets) and port.
absl::StatusOr<Endpoint> Resolve(const std::string& host, int port);

// A listening TCP socket at `at` (port 0: an ephemeral one). `reuse`:
// SO_REUSEADDR, for a fixed port bound again soon after its last world.
absl::StatusOr<Fd> Listen(const Endpoint& at, bool reuse);
// The address a socket is bound to (the port a Listen at port 0 got).
absl::StatusOr<Endpoint> LocalAddress(int fd);

// Connects, retrying while the root is not listening yet (connection
// refused, unreachable) until the deadline.
absl::StatusOr<Fd> ConnectWithRetry(const Endpoint& to, Deadline deadline);

// Non-blocking fd helpers: all of the bytes, or an error naming `what`
// (Timeout at the deadline, RemoteError when the peer closed).
absl::Status WriteAll(int fd, const void* data, size_t n, Deadline deadline, const std::string& what);
absl::Status ReadAll(int fd, void* data, size_t n, Deadline deadline, const std::string& what);
absl::Status SetNonBlocking(int fd);

}  // namespace bootstrap
}  // namespace weft

#endif  // WEFT_COMM_BOOTSTRAP_NET_H_
