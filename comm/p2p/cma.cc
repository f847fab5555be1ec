#include "comm/p2p/cma.h"

#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/status.h"

namespace weft {
namespace p2p {

absl::Status CmaRead(pid_t pid, const void* remote, void* local, size_t bytes) {
  auto* to = static_cast<unsigned char*>(local);
  auto from = reinterpret_cast<uintptr_t>(remote);
  while (bytes > 0) {
    iovec l{to, bytes};
    iovec r{reinterpret_cast<void*>(from), bytes};
    const ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int err = got < 0 ? errno : EFAULT;  // 0 bytes: the range ends where nothing is mapped
      return SystemError("process_vm_readv of %zu bytes at %p in process %d failed: %s", bytes, remote,
                         static_cast<int>(pid), std::strerror(err));
    }
    to += got;
    from += static_cast<uintptr_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

const uint64_t* CmaProbeWord() {
  static const uint64_t word = [] {
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(v))) {
      // No entropy yet (early boot): the pid and the clock still tell processes apart.
      v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9e3779b97f4a7c15u ^
          static_cast<uint64_t>(getpid());
    }
    return v != 0 ? v : 1;
  }();
  return &word;
}

}  // namespace p2p
}  // namespace weft
