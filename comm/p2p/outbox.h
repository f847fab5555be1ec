// Eager sends for the point-to-point backends (MPI, UCX): what lets a host
// send return before its receiver has posted the matching receive.
//
// Send copies the bytes into a buffer the outbox owns, queues them, and
// returns. A thread of the outbox posts the queued messages on the backend's
// wire (Wire: MPI_Isend, or a UCP tag send) and polls them until they are
// delivered, so a transfer that needs the sender's progress (a rendezvous
// over TCP) completes while the application computes or waits elsewhere.
// Messages to one peer on one tag are posted in the order they were sent;
// at most kInFlight messages to one peer are in flight at once (many
// outstanding rendezvous transfers per peer hung UCX with CMA), except that
// a tag with none in flight may always post its next one. Messages to
// different peers, or on different tags, go independently, so no send waits
// behind one whose receiver is late (a receiver may take the tags in
// another order than they were sent). A message is at most `message_bytes`
// (a send of more is several, which the receiver takes in order:
// exchange.h's Receive).
//
// A send that makes no progress for the communicator's timeout, or any
// failure of the wire, fails the outbox: the error goes to `on_error` (the
// communicator's async error), the messages still queued are dropped, and
// later sends are refused. Abort drops them at once. The thread exists while
// the outbox does and sleeps while nothing is queued.
//
//   Outbox out(wire, patience, 16 << 20, on_error);
//   RETURN_IF_ERROR(out.Send(buf, bytes, peer, tag));   // returns at once
#ifndef WEFT_COMM_P2P_OUTBOX_H_
#define WEFT_COMM_P2P_OUTBOX_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/p2p/backoff.h"

namespace weft {
namespace p2p {

class Outbox {
 public:
  // The backend's wire. Each is called from the outbox's thread, and must
  // take the backend's own locks.
  struct Wire {
    // Posts data[0, bytes) to `peer` on `tag`: a handle for test, or nullptr
    // when the send completed at once.
    std::function<absl::StatusOr<void*>(const void* data, size_t bytes, int peer, int tag)> post;
    // Progresses the transport; true (and the handle released) once the
    // send behind `handle` is done.
    std::function<absl::StatusOr<bool>(void* handle)> test;
    // Releases a handle that will not be tested again (after a failure).
    std::function<void(void* handle)> drop;
  };
  static constexpr int kInFlight = 16;  // per peer

  Outbox(Wire wire, const Patience& patience, size_t message_bytes, std::function<void(const absl::Status&)> on_error);
  // Waits until every message is delivered (or the outbox failed), then
  // stops the thread.
  ~Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Copies data[0, bytes) for `peer` on the wire's `tag` and returns;
  // refused once the outbox failed.
  absl::Status Send(const void* data, size_t bytes, int peer, int tag);
  // OK, or the failure that stopped the outbox.
  absl::Status status() const;
  size_t message_bytes() const { return message_bytes_; }

 private:
  struct Message {
    std::shared_ptr<std::vector<unsigned char>> data;  // shared by the messages of one send
    size_t offset = 0, bytes = 0;
    int peer = -1;
    int tag = 0;
    void* handle = nullptr;
  };
  // The messages of one (peer, tag) not yet posted, and how many are in flight.
  struct Queue {
    std::deque<Message> waiting;
    int flying = 0;
  };
  void Run();
  // Posts what may go and tests what is in flight; true when anything moved.
  absl::StatusOr<bool> Step();
  void Fail(const absl::Status& s);

  const Wire wire_;
  const Patience patience_;
  const size_t message_bytes_;
  const std::function<void(const absl::Status&)> on_error_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> incoming_;  // sent, not yet seen by the thread
  size_t pending_ = 0;            // messages not yet delivered
  bool stop_ = false;
  absl::Status failed_;

  // The thread's own.
  std::map<std::pair<int, int>, Queue> queues_;  // by (peer, tag), in send order; erased once idle
  std::vector<Message> flying_;
  std::vector<int> flying_to_;  // by peer

  std::thread thread_;
};

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_OUTBOX_H_
