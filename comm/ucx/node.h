// The UCX backend's process-wide state: its one worker and its peers.
//
// One UCP context and one worker per process (as UCC's and torch-ucc's UCP
// transports have), shared by every UCX communicator of the process: each
// message's tag carries its communicator's id and sender's rank, so a
// communicator owns no UCX resources and destroying one is local, as
// weftCommDestroy promises (closing an endpoint needs the peer's help).
// Endpoints to other processes are made when first used, from worker
// addresses that each world exchanges over its bootstrap (comm/bootstrap:
// MPI's under mpirun, weft's own socket bootstrap elsewhere). A process
// may belong to several worlds; a peer seen in two is one endpoint.
//
// The worker is SERIALIZED: every UCP call holds the node's lock, so host
// streams of several communicators can drive it from their own threads.
//
// A rank that waits under the block policy sleeps on the worker's event fd
// (UCP's wakeup feature: ucp_worker_arm, then poll), so it costs no CPU and
// wakes as soon as a message or a completion arrives, where a timed nap
// would cost a wake-up every nap and up to a nap's latency. Where the
// transports offer no events, Sleep() is unavailable and the engine naps.
//
//   ASSIGN_OR_RETURN(Node* node, Node::Get());
//   ASSIGN_OR_RETURN(int peer, node->AddPeer(address));  // from the bootstrap
//   Node::Lock lock(*node);
//   Ucp().tag_send_nbx(node->Endpoint(peer).value(), ...);   // ucp_api.h: libucp, loaded by Get()
#ifndef WEFT_COMM_UCX_NODE_H_
#define WEFT_COMM_UCX_NODE_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
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
  // The process's node, made on first use: UCP's context and worker. Local.
  static absl::StatusOr<Node*> Get();

  // Held around every UCP call on the worker.
  class Lock {
   public:
    explicit Lock(Node& n) : lock_(n.mu_) {}

   private:
    std::lock_guard<std::mutex> lock_;
  };

  ucp_worker_h worker() const { return worker_; }
  // ucp_worker_progress, under Lock. When it completed something while
  // another thread sleeps on the event fd, that thread is signalled: the
  // completion may be the one it waits for, and its own events were
  // consumed by this progress.
  unsigned Progress();
  // Whether Sleep() can be woken by the worker's events.
  bool CanSleep() const { return efd_.load(std::memory_order_relaxed) >= 0; }
  // Not under Lock. Blocks until the worker has an event or `limit` passed;
  // returns at once when progress finds something (the caller polls its
  // requests again either way).
  void Sleep(std::chrono::microseconds limit);
  // How Sleep() has ended so far in this process: what a test observes.
  struct SleepCounts {
    uint64_t sleeps = 0;  // waits on the event fd
    uint64_t woken = 0;   // of those, ended by an event before their limit
    uint64_t busy = 0;    // returned without sleeping: something had arrived
  };
  SleepCounts sleep_counts();
  // This worker's address, for the other ranks of a world.
  const std::string& address() const { return address_; }
  // The peer index of the process whose worker has `address` (a new one the
  // first time). Under Lock.
  int AddPeer(const std::string& address);
  // The endpoint to peer `peer` (made on first use). Under Lock.
  absl::StatusOr<ucp_ep_h> Endpoint(int peer);
  // Communicator ids: a new communicator takes the largest NextId() of its
  // members and every member then Claims it, so an id is never in use
  // twice in one process (messages of a destroyed communicator cannot
  // match a new one's). As with NCCL, a process creates its communicators
  // one at a time (not from several threads at once).
  uint32_t NextId();
  // Fails once the ids (pipeline.h: kMaxIds) are spent.
  absl::Status Claim(uint32_t id);

 private:
  Node() = default;
  absl::Status Init();

  absl::Status InitWorker(bool wakeup);

  std::mutex mu_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::atomic<int> efd_{-1};  // the worker's event fd; -1 without the wakeup feature (or once arming failed)
  int sleepers_ = 0;    // threads in Sleep's poll, under mu_
  SleepCounts counts_;  // under mu_
  std::string address_;
  std::map<std::string, int> peer_of_;  // worker address -> peer index
  std::vector<std::string> addresses_;  // by peer index
  std::vector<ucp_ep_h> eps_;           // by peer index; null until first used
  std::mutex id_mu_;
  uint32_t next_id_ = 0;
};

}  // namespace ucx
}  // namespace weft

#endif  // WEFT_COMM_UCX_NODE_H_
