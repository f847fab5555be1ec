// A client of torch's TCPStore (c10d::TCPStore, the libuv and the classic
// server alike), enough to rendezvous through the store that torchrun's
// agent already serves at MASTER_ADDR:MASTER_PORT: rank 0 publishes weft's
// unique id under a key, the other ranks wait for it. A port of weft's own
// next to torch's (MASTER_PORT + 1) may be taken: torchrun --standalone
// picks MASTER_PORT among the ephemeral ports, and the port above it is as
// likely as any to be some connection's local port.
//
// The wire, as torch's client speaks it (little-endian; a string is a u64
// length and its bytes; keys carry TCPStore's "/" prefix):
//   VALIDATE(0) u32 magic 0x3C85F7CE                  no answer
//   PING(13)    u32 nonce                             -> u32 nonce
//   SET(1)      key value                             no answer
//   ADD(4)      key i64 delta                         -> i64 the sum
//   WAIT(6)     u64 count, keys                       -> u8 0 once all are set
//   GET(3)      key                                   -> value
//
//   ASSIGN_OR_RETURN(TorchStore s, TorchStore::Connect(host, port, deadline));
//   RETURN_IF_ERROR(s.Set("weft/...", bytes, deadline));        // rank 0
//   ASSIGN_OR_RETURN(std::string v, s.WaitGet("weft/...", deadline));  // the others
#ifndef WEFT_COMM_BOOTSTRAP_TORCH_STORE_H_
#define WEFT_COMM_BOOTSTRAP_TORCH_STORE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/bootstrap/net.h"

namespace weft {
namespace bootstrap {

class TorchStore {
 public:
  // Connects (retrying while nothing listens yet), validates and pings: an
  // error naming `host:port` when what answers there is no TCPStore.
  static absl::StatusOr<TorchStore> Connect(const std::string& host, int port, Deadline deadline);

  absl::Status Set(const std::string& key, const std::string& value, Deadline deadline);
  // Adds `delta` to the counter `key` (0 when unset); returns the sum.
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline);
  // Blocks until `key` is set (Timeout at the deadline), then reads it.
  absl::StatusOr<std::string> WaitGet(const std::string& key, Deadline deadline);

  const std::string& where() const { return where_; }

 private:
  TorchStore(Fd fd, std::string where) : fd_(std::move(fd)), where_(std::move(where)) {}
  absl::Status Send(const std::string& bytes, Deadline deadline, const std::string& what);
  absl::Status Recv(void* out, size_t n, Deadline deadline, const std::string& what);

  Fd fd_;
  std::string where_;  // "torch's store at host:port"
};

}  // namespace bootstrap
}  // namespace weft

#endif  // WEFT_COMM_BOOTSTRAP_TORCH_STORE_H_
