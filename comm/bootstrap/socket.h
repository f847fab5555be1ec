// weft's own bootstrap, for worlds no MPI launcher made: a unique id names
// a root (root.h) that every rank connects to over TCP; the ranks'
// all-gathers go through it until the world has formed, then every rank
// says goodbye and the root ends. weftGetUniqueId + weftCommInitRank use it
// directly; torchrun's, Slurm's and weft's own variables (launch.h) name the
// root instead of an id, and rank 0 serves it.
//
//   ASSIGN_OR_RETURN(UniqueId id, MakeUniqueId());                 // one process
//   ASSIGN_OR_RETURN(auto b, JoinSocketWorld(id, nranks, rank, timeout_ms));  // every rank
#ifndef WEFT_COMM_BOOTSTRAP_SOCKET_H_
#define WEFT_COMM_BOOTSTRAP_SOCKET_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/bootstrap/bootstrap.h"
#include "comm/bootstrap/wire.h"

namespace weft {
namespace bootstrap {

// A new job tag: 64 random bits.
uint64_t RandomTag();

// A unique id whose root listens in this process, on ChooseListenAddress()
// at an ephemeral port.
absl::StatusOr<UniqueId> MakeUniqueId();

// The root of a world named by an address rather than an id (launch.h):
// listens on every address of `root`'s family at `root`'s port.
absl::Status ServeRoot(const Endpoint& root, uint64_t tag);

// Rank `rank` of an `nranks`-rank world through the root `id` names.
// Returns once connected (the first AllGather waits for every rank). Every
// wait ends by `timeout_ms` (the root's own report of what went wrong comes
// first, when it can).
absl::StatusOr<std::unique_ptr<Bootstrap>> JoinSocketWorld(const UniqueId& id, int nranks, int rank,
                                                           int timeout_ms);

}  // namespace bootstrap
}  // namespace weft

#endif  // WEFT_COMM_BOOTSTRAP_SOCKET_H_
