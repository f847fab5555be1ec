// The structs behind the C ABI's opaque handles, and a registry of the live
// ones, so that a NULL, destroyed or foreign handle is refused with a message
// instead of being dereferenced.
#ifndef WEFT_CAPI_HANDLES_H_
#define WEFT_CAPI_HANDLES_H_

#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/status.h"
#include "shard/buffer_pool.h"
#include "weft/weft.h"

struct weftComm {
  std::unique_ptr<weft::Communicator> impl;
  // Unsharded buffers of this communicator's shard groups (capi/shard.cc),
  // shared with them so that a group outliving its communicator can still
  // be destroyed.
  std::shared_ptr<weft::shard::BufferPool> pool = std::make_shared<weft::shard::BufferPool>();
};

namespace weft {
namespace capi {

// Live handles of one type.
template <typename H>
class Live {
 public:
  static void Add(const H* h) {
    std::lock_guard<std::mutex> lock(mu());
    set().insert(h);
  }
  static void Remove(const H* h) {
    std::lock_guard<std::mutex> lock(mu());
    set().erase(h);
  }
  static bool Contains(const H* h) {
    std::lock_guard<std::mutex> lock(mu());
    return set().contains(h);
  }
  // OK when `h` is a live handle; `what` names the argument in the error.
  static absl::Status Check(const char* what, const H* h) {
    if (h == nullptr) return InvalidArgument("%s is NULL", what);
    std::lock_guard<std::mutex> lock(mu());
    if (!set().contains(h)) return InvalidArgument("%s = %p is not a live handle (destroyed, or never created)", what, h);
    return absl::OkStatus();
  }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static absl::flat_hash_set<const H*>& set() {
    static auto* s = new absl::flat_hash_set<const H*>();
    return *s;
  }
};

// Checks `comm` and returns its Communicator.
inline absl::StatusOr<Communicator*> GetComm(const char* what, weftComm_t comm) {
  RETURN_IF_ERROR(Live<weftComm>::Check(what, comm));
  return comm->impl.get();
}

// A reducer or shard group (`what`, e.g. "reducer = 0x...") keeps a pointer
// to the communicator it was made on: once that is destroyed, every call on
// it is refused instead of using freed memory.
inline absl::Status CheckOwner(const std::string& what, weftComm_t comm) {
  if (Live<weftComm>::Contains(comm)) return absl::OkStatus();
  return InvalidUsage("%s: its communicator %p was destroyed (destroy reducers and shard groups before their "
                      "communicator)", what, static_cast<const void*>(comm));
}

// Wraps a new communicator in a registered handle.
weftComm_t NewHandle(std::unique_ptr<Communicator> impl);

}  // namespace capi
}  // namespace weft

#endif  // WEFT_CAPI_HANDLES_H_
