// The in-process backend: N ranks as threads of one process.
//
// It is weft's test backbone (every collective, the reducer and the sharder
// run N ranks in one process, fast, with no MPI) and the single-process
// backend. Ranks share a World: each collective publishes every rank's
// buffer pointers, then each rank reduces one chunk straight out of its
// peers' memory, so no byte is copied twice and every rank ends with the
// same bits (each chunk is reduced once, in rank order).
//
//   ASSIGN_OR_RETURN(auto comms, InitInProcess(4, options));  // comms[r] for thread r
#ifndef WEFT_COMM_INPROC_COMM_H_
#define WEFT_COMM_INPROC_COMM_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "comm/direct.h"
#include "core/status.h"

namespace weft {
namespace inproc {

// What one rank publishes for a collective.
struct Slot {
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t a = 0;  // the count
  int64_t b = 0;  // the kind of call, type, op and root (Signature)
  uint64_t c = 0;  // pieces: a hash of their offsets and counts; all_reduce_ready: upto (in parts: hashed with them)
  uint64_t d = 0;  // all_reduce_ready: how far this rank has its buffer ready; split: color and key (not compared)
};

class World {
 public:
  explicit World(int size) : size_(size), slots_(size) {}
  int size() const { return size_; }
  Slot& slot(int rank) { return slots_[rank]; }

  // Generation barrier. Fails with Timeout after timeout_ms (and marks the
  // world broken, so the others fail at once rather than wait out their own
  // timeouts), with Aborted once any rank aborted. With `compare`, the last
  // rank in also finds the first slot whose {a, b, c} differ from rank 0's,
  // for disagreement(), and the least d, for least_d(): both there, before
  // any rank can leave and publish its next call.
  absl::Status Arrive(int rank, int timeout_ms, bool compare = false);
  // After a comparing Arrive, until the next one: -1, or the first rank
  // whose slot differed.
  int disagreement() const { return disagree_; }
  // After a comparing Arrive, until the next one: the least `d` of the
  // slots. Taken by the last rank in, like the comparison: once a rank
  // leaves the barrier it may publish its next call over its slot.
  uint64_t least_d() const { return least_d_; }
  void Abort();

  // The world for (split number, color), created by whichever member asks first.
  std::shared_ptr<World> SplitWorld(uint64_t seq, int color, int size);
  void ForgetSplit(uint64_t seq);

  // Work sharing. A collective's chunks are tickets [base, end) of one
  // counter that only grows over the world's life; every rank knows `base`
  // (the chunks of the world's earlier collectives). Claim returns the next
  // unclaimed ticket below `end`, or `end` once all are claimed; a rank late
  // to its previous collective can never claim one of the next (CAS bounded
  // by its own `end`). Finish marks a claimed chunk done; WaitDone returns
  // once every chunk below `end` is done, so no peer still reads or writes
  // this rank's buffers.
  uint64_t Claim(uint64_t end);
  void Finish(uint64_t end);
  void WaitDone(uint64_t end);

  // Point-to-point: the messages from one rank to another on one tag,
  // oldest first. A message owns a copy of the sent bytes, so a send never
  // waits for its receiver. Take waits for the oldest (at most timeout_ms;
  // Aborted once any rank aborted) and removes it; from kAnySource, the one
  // posted first of the oldest from each rank.
  struct Message {
    std::vector<unsigned char> bytes;
    size_t count = 0;
    DataType t = DataType::kFloat32;
    int from = -1;
    uint64_t posted = 0;  // the world's post counter: which of two messages came first
  };
  void Post(int from, int to, int tag, Message m);
  absl::StatusOr<Message> Take(int from, int to, int tag, int timeout_ms);

 private:
  const int size_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  // Written under mu_; read without it by ranks polling before they sleep.
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
  int broken_by_ = -1;  // rank that timed out
  int disagree_ = -1;   // written by the last rank in, before the generation moves
  uint64_t least_d_ = 0;  // likewise
  std::atomic<uint64_t> next_ticket_{0};
  std::atomic<uint64_t> done_tickets_{0};
  std::map<std::pair<uint64_t, int>, std::shared_ptr<World>> splits_;
  // The oldest message to `to` on `tag` from `from`, or from any rank
  // (kAnySource), or null. Needs mu_.
  std::deque<Message>* Oldest(int from, int to, int tag);
  std::map<std::tuple<int, int, int>, std::deque<Message>> mail_;  // (to, tag, from), under mu_
  uint64_t posted_ = 0;  // messages posted, under mu_
};

// Offers the direct-buffer reductions (comm/direct.h): ranks read each
// other's memory, so pieces and ready extents cost what one buffer does.
class InProcComm final : public Communicator, public DirectReduce {
 public:
  InProcComm(std::shared_ptr<World> world, int rank, const CommOptions& options);
  Backend backend() const override { return Backend::kInProcess; }

 protected:
  absl::Status DoAllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                           void* stream) override;
  absl::Status DoReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                               void* stream) override;
  absl::Status DoAllGather(const void* send, void* recv, size_t sendcount, DataType t, void* stream) override;
  absl::Status DoBroadcast(const void* send, void* recv, size_t count, DataType t, int root,
                           void* stream) override;
  absl::Status DoBarrier() override;
  absl::Status DoSend(const void* send, size_t count, DataType t, int peer, int tag, void* stream) override;
  absl::Status DoRecv(void* recv, size_t count, DataType t, int peer, int tag, int* source, void* stream) override;
  absl::Status DoReduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root,
                        void* stream) override;
  absl::Status DoGather(const void* send, void* recv, size_t sendcount, DataType t, int root, void* stream) override;
  absl::Status DoScatter(const void* send, void* recv, size_t recvcount, DataType t, int root, void* stream) override;
  absl::Status DoAllToAllv(const void* send, const std::vector<size_t>& sendcounts, const std::vector<size_t>& sdispls,
                           void* recv, const std::vector<size_t>& recvcounts, const std::vector<size_t>& rdispls,
                           DataType t, void* stream) override;
  bool ReducesPieces() const override { return true; }
  bool AgreesReadyInCall() const override { return true; }
  absl::StatusOr<size_t> DoAllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t,
                                          RedOp op) override;
  bool ReducesReadyParts() const override { return true; }
  absl::StatusOr<size_t> DoAllReduceReadyParts(const std::vector<Piece>& parts, size_t reduced, size_t offer,
                                               size_t upto, DataType t, RedOp op) override;
  absl::Status DoAllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override;
  void DoAbort() override { world_->Abort(); }
  // A receive touches only the world's mailboxes (under their lock) and broken_.
  bool ReceivesApart() const override { return true; }

 private:
  absl::Status Arrive(bool compare = false) {
    if (!broken_.ok()) return broken_.get();
    return world_->Arrive(rank(), options().timeout_ms, compare);
  }
  // Publishes {send, recv, count, signature, layout, offer} and waits for
  // every rank; an error when the ranks passed different counts, types, ops,
  // roots or piece layouts (`offer` may differ).
  absl::Status Publish(const void* send, void* recv, size_t count, int64_t signature, uint64_t layout = 0,
                       uint64_t offer = 0);
  // Publishes a split's color and key (compared as a call, not as values).
  absl::Status PublishSplit(int color, int key);
  // The all-reduce of `count` elements from every rank's published send to
  // its recv, in shared chunks.
  void AllReduceShared(size_t count, DataType t, RedOp op);
  // Elements [begin, end) of a buffer in pieces, every rank's pieces
  // published in its slot's `send`.
  void ReducePiecesShared(const std::vector<Piece>& pieces, size_t begin, size_t end, DataType t, RedOp op);
  // Runs work(i) for each chunk i in [0, n) of this collective, shared with
  // the peers: a rank whose thread is not running does not hold the others
  // up, which is what costs most when ranks' threads outnumber the cores.
  template <typename Work>
  void Share(size_t n, Work&& work);
  // dst[0][0..n) = op over ranks r of src[r][0..n), in rank order, then
  // copied to dst[1..ndst): one element range of every rank's input to
  // `ndst` outputs. Each block is read from every input before any output
  // is written, so an output may be its input.
  void ReduceInto(size_t n, DataType t, RedOp op, const char* const* src, char* const* dst, int ndst);

  std::shared_ptr<World> world_;
  // Set on every rank by a call whose ranks disagreed, as the MPI and UCX
  // backends do: later calls are refused (the program's calls are out of
  // step; going on would pair the wrong calls). Ready agreements whose
  // calls match but whose extents differ leave it alone (P2pComm's rule).
  // Receives, which run beside the other calls, set and read it too.
  FirstError broken_;
  uint64_t splits_ = 0;
  uint64_t tickets_ = 0;            // chunks of this world's collectives so far: the next one's base
  std::vector<unsigned char> acc_;  // accumulator scratch, reused across calls
  std::vector<const char*> src_;    // Reduce's arguments, per rank, reused
  std::vector<char*> dst_;
};

// `n` communicators of one new world; comms[r] is rank r.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitInProcess(int n, const CommOptions& options);

}  // namespace inproc
}  // namespace weft

#endif  // WEFT_COMM_INPROC_COMM_H_
