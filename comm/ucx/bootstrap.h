// The UCX backend's process-wide state, and how it is bootstrapped.
//
// One UCP context and one worker per process (as UCC's and torch-ucc's UCP
// transports have), shared by every UCX communicator of the process: each
// message's tag carries its communicator's id and sender's rank, so a
// communicator owns no UCX resources and destroying one is local, as
// weftCommDestroy promises (closing an endpoint needs the peer's help).
// Endpoints to the other processes are made when first used, from worker
// addresses exchanged once over MPI: UCX has no launcher of its own, and
// mpirun/srun start the job (mpi/bootstrap.h initialises MPI).
//
// The worker is SERIALIZED: every UCP call holds the node's lock, so host
// streams of several communicators can drive it from their own threads.
//
//   ASSIGN_OR_RETURN(Node* node, Node::Get(timeout_ms));  // collective the first time
//   Node::Lock lock(*node);
//   ucp_tag_send_nbx(node->Endpoint(world_rank).value(), ...);
#ifndef WEFT_COMM_UCX_BOOTSTRAP_H_
#define WEFT_COMM_UCX_BOOTSTRAP_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weft {
namespace ucx {

// A UCS status as an absl::Status naming the call ("ucp_init: No such device").
absl::Status CheckUcs(ucs_status_t s, const char* call);

class Node {
 public:
  // The process's node, made on first use: UCP is initialised and the
  // worker addresses of every process of MPI_COMM_WORLD are exchanged, so
  // the first call is collective over the job (weftCommInitWorld is).
  static absl::StatusOr<Node*> Get(int timeout_ms);

  // Held around every UCP call on the worker.
  class Lock {
   public:
    explicit Lock(Node& n) : lock_(n.mu_) {}

   private:
    std::lock_guard<std::mutex> lock_;
  };

  ucp_worker_h worker() const { return worker_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return static_cast<int>(addresses_.size()); }
  // The endpoint to process `world_rank` (made on first use). Under Lock.
  absl::StatusOr<ucp_ep_h> Endpoint(int world_rank);
  // Communicator ids: a new communicator takes the largest NextId() of its
  // members and every member then Claims it, so an id is never in use
  // twice in one process (messages of a destroyed communicator cannot
  // match a new one's). As with NCCL, a process creates its communicators
  // one at a time (not from several threads at once).
  uint32_t NextId();
  // Fails once the ids (pipeline.h: kMaxIds) are spent.
  absl::Status Claim(uint32_t id);
  // A world communicator's id: the largest NextId() over MPI_COMM_WORLD
  // (collective over the job), claimed.
  absl::StatusOr<uint32_t> AgreeWorldId(int timeout_ms);

 private:
  Node() = default;
  absl::Status Init(int timeout_ms);

  std::mutex mu_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int world_rank_ = 0;
  std::vector<std::string> addresses_;  // by world rank
  std::vector<ucp_ep_h> eps_;           // by world rank; null until first used
  std::mutex id_mu_;
  uint32_t next_id_ = 0;
};

}  // namespace ucx
}  // namespace weft

#endif  // WEFT_COMM_UCX_BOOTSTRAP_H_
