// The bootstrap: how the ranks of a new world find each other before any
// backend's transport exists, and move the little each backend needs to set
// itself up (UCX worker addresses, the ncclUniqueId, host identities).
//
// A Bootstrap is a tiny collective channel with one operation, an
// all-gather of equal-sized blocks; everything else is built on it. Three
// kinds make one, each in its own file of this folder:
//   - mpi.cc: MPI_COMM_WORLD, when an MPI launcher started the job (built
//     only with MPI);
//   - socket.cc: weft's own, a star of TCP connections to a root named by a
//     unique id (weftGetUniqueId, torchrun's and Slurm's variables);
//   - Self(): a world of one rank, which needs nobody.
// Backends take a Bootstrap& and never learn which kind they got, so no
// backend includes another backend's files.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Bootstrap> b, JoinSocketWorld(id, nranks, rank, timeout_ms));
//   ASSIGN_OR_RETURN(std::vector<std::string> addresses, b->AllGatherVar(my_address));
//   ASSIGN_OR_RETURN(Locality where, FindLocality(*b));
#ifndef WEFT_COMM_BOOTSTRAP_BOOTSTRAP_H_
#define WEFT_COMM_BOOTSTRAP_BOOTSTRAP_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weft {
namespace bootstrap {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Collective: every rank's `bytes` bytes at `mine` land in rank order in
  // all[0, size() * bytes) on every rank. Every rank passes the same
  // `bytes` (a rank that does not fails the call on every rank). Fails with
  // the bootstrap's timeout rather than wait for a rank that never comes.
  virtual absl::Status AllGather(const void* mine, void* all, size_t bytes) = 0;
  // For messages: "MPI_COMM_WORLD", "the bootstrap root at 10.1.2.3:29501".
  virtual std::string Describe() const = 0;

  // Built on AllGather (bootstrap-sized data only: every rank receives
  // every rank's block).
  // rank 0's bytes[0, n) to every rank.
  absl::Status Broadcast(void* bytes, size_t n);
  // Blocks of any length: their lengths first, then the blocks padded.
  absl::StatusOr<std::vector<std::string>> AllGatherVar(const std::string& mine);
  // True on every rank when `ok` is true on every rank: a rank that cannot
  // go on says so here instead of leaving the others waiting.
  absl::StatusOr<bool> AllOk(bool ok);

 protected:
  Bootstrap(int rank, int size) : rank_(rank), size_(size) {}

 private:
  const int rank_;
  const int size_;
};

// A world of one rank: this process.
std::unique_ptr<Bootstrap> Self();

// This node's identity: host name and the kernel's boot id, which differ
// between two machines (and between network namespaces with hostnames of
// their own), and are equal for every process of one.
std::string NodeKey();

// Which ranks share this rank's node, from every rank's NodeKey.
struct Locality {
  int local_rank = 0;  // among the ranks of this node, in rank order
  int local_size = 1;  // ranks on this node
  int num_nodes = 1;
  std::vector<int> node_of;  // by rank: its node, numbered in order of first rank
};
absl::StatusOr<Locality> FindLocality(Bootstrap& b);

// More ranks on this node than it has cores: polling loops yield at once.
bool Oversubscribed(const Locality& where);

}  // namespace bootstrap
}  // namespace weft

#endif  // WEFT_COMM_BOOTSTRAP_BOOTSTRAP_H_
