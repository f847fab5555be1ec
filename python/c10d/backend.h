// weft as a torch.distributed backend: dist.init_process_group("weft").
//
// A thin translation layer over include/weft/weft.h: torch's tensors and
// options in, weft C ABI calls out, a Work with a future back. One backend
// object per process group; each call routes on its tensors' device:
//  - CPU tensors go to the group's host communicator, enqueued on a weft host
//    stream (weftStreamCreate), so the call returns before the data moved;
//    a stream callback behind them (weftStreamAddCallback) completes the
//    Work and its future on the stream's thread as soon as it has, and
//    Work::wait blocks until then.
//  - CUDA tensors go to a CUDA communicator made by the group's first CUDA
//    call, enqueued on its stream after torch's current stream (events, never
//    a device synchronisation); Work::wait makes the current stream wait.
// Inputs are kept alive until the collective is done; non-contiguous tensors
// travel through contiguous copies. Failures are exceptions naming the op,
// the rank and weftGetLastError().
#ifndef WEFT_PYTHON_C10D_BACKEND_H_
#define WEFT_PYTHON_C10D_BACKEND_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm_cache.h"
#include "cuda_order.h"
#include "weft/weft.h"

namespace weft_c10d {

class WeftBackend;

// A group's options: torch's (the name "weft", the timeout, the group's name
// and ranks), as a type of weft's own so that Python can copy them
// (split_group deep-copies the parent's; torch's base Options cannot be).
struct WeftOptions : c10d::Backend::Options {
  explicit WeftOptions(std::chrono::milliseconds timeout) : Options("weft", timeout) {}
  c10::intrusive_ptr<WeftOptions> Copy() const;
};

// One collective, or the collectives of one coalesced group.
class WeftWork : public c10d::Work {
 public:
  WeftWork(int rank, c10d::OpType type, const char* op, bool cuda, weftComm_t comm);

  bool isCompleted() override;
  bool isSuccess() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  // A recv from any source: the sender, once wait() has returned (-1 before,
  // or when it failed). Any other Work: torch's refusal.
  int sourceRank() const override;

 private:
  friend class WeftBackend;
  friend class Op;
  void Complete(std::exception_ptr error);  // once the data is there (or failed to get there)
  // Host work: the stream callback behind its collectives. It holds a
  // reference to the Work (taken when it was enqueued) and completes it
  // with the collectives' error, then hands the stream back.
  static void OnStreamDone(weftStream_t stream, weftResult_t status, void* arg);

  const char* op_;
  bool cuda_;
  weftComm_t comm_;
  std::vector<at::Tensor> keep_;             // alive until the collective is done
  std::vector<at::Tensor> outputs_;          // the future's value
  // Copies out of temporaries: host, run once the data is there; a CUDA
  // coalesced group, enqueued behind its kernels at endCoalescing.
  std::vector<std::function<void()>> post_;
  weftStream_t stream_ = nullptr;            // host: the stream it runs on
  // Host: hands the stream back to the group, and with it the callback's
  // reference to this Work (null where there is none), which the group
  // keeps when it is the last (see OnStreamDone).
  std::function<void(weftStream_t, c10::intrusive_ptr<WeftWork>)> release_;
  // Host: the backend whose pool the stream goes back to. A waiter runs the
  // stream's work itself (weftStreamWaitersRun) while it holds a pin, and the
  // stream goes back to the pool only once the last pin is gone: until then
  // no other collective can be enqueued behind this Work's and be waited for
  // with it. Guarded by the backend's mutex.
  WeftBackend* backend_ = nullptr;
  int pins_ = 0;
  bool released_ = false;  // the stream is back in the pool (or held for it by a pin)
  bool open_ = false;  // a coalesced group before endCoalescing: more may join it
  bool grouped_ = false;  // its calls are in an open weftGroupStart (on the issuing thread)
  int device_ = -1;       // CUDA: the device of a coalesced group
  std::shared_ptr<int> source_;  // a recv from any source: where weft writes the sender
  std::shared_ptr<CudaDone> done_;           // CUDA: its end on the communicator's stream
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class WeftBackend : public c10d::Backend {
 public:
  WeftBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  ~WeftBackend() override;

  const std::string getBackendName() const override { return "weft"; }
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  // CPU tensors; the Work's sourceRank() is the sender.
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  // torch's deprecated all_gather_coalesced: outputs[r][i] is rank r's inputs[i].
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;

  // Subgroups made by splitting this group (split.cc): dist.split_group, and
  // DeviceMesh and new_group where init_process_group bound a device.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // The group without `ranks_to_exclude` (split.cc), for dist.shrink_group:
  // made by the remaining ranks alone, so the excluded may be dead. flags:
  // torch's SHRINK_DEFAULT, or SHRINK_ABORT to fail this group's work in
  // flight first.
  static constexpr int kShrinkDefault = 0;
  static constexpr int kShrinkAbort = 1;
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                           const c10::intrusive_ptr<Options>& opts_override) override;

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void abort() override;     // local; waiting and later collectives fail
  void shutdown() override;  // waits for issued work, then frees streams and communicators

 private:
  friend class Op;
  friend class WeftWork;
  weftStream_t LeaseStream();
  // Drops the retired Works (their tensors) on this, an issuing, thread.
  void DropRetired();
  // Pins the Work's stream for a waiter (false: it already went back to the
  // pool, the Work is done), and unpins it, sending it back where due.
  bool PinStream(WeftWork& work);
  void UnpinStream(WeftWork& work);
  // Host work, once its collectives are enqueued: completes on its stream.
  void Finish(const c10::intrusive_ptr<WeftWork>& work);
  CudaOrder& Order(int device);
  void CheckP2p(const char* op, const at::Tensor& t, int peer, int tag);
  // all_reduce of a sparse COO tensor (sparse.cc): SUM on cpu, blocking.
  c10::intrusive_ptr<c10d::Work> SparseAllReduce(at::Tensor& t, const c10d::ReduceOp& rop);
  weftResult_t EndGroup(WeftWork& work);
  // A new group of `ranks` (this group's numbering, this rank among them),
  // met in this group's store under `why`, the ranks and how many such
  // children came before. Under split_mu_.
  c10::intrusive_ptr<c10d::Backend> Child(const char* why, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts);
  void AbandonGroup();

  CommCache comms_;
  uint64_t seq_ = 0;
  // Host streams: one per collective in flight (a stream's thread runs one
  // collective at a time, in issue order), reused once its work completed
  // (after its future's callbacks: one that issues and waits on another
  // collective gets another stream, not this one, still busy with it).
  std::mutex mu_;
  std::vector<weftStream_t> free_streams_;
  std::vector<weftStream_t> all_streams_;
  // The flags of this group's streams, decided when it makes its first
  // (weftStreamIssuerCpu or not: StreamsFollowIssuer in backend.cc); 0 before.
  unsigned stream_flags_ = 0;
  // Completed host work that nobody else held when its stream callback
  // ended: dropped on an issuing thread (the next collective's issue, by
  // DropRetired) or by shutdown, never on a stream's thread.
  std::vector<c10::intrusive_ptr<WeftWork>> retired_;
  bool shut_ = false;
  std::unique_ptr<CudaOrder> order_;
  // startCoalescing .. endCoalescing: one Work for every collective between.
  bool coalescing_ = false;
  c10::intrusive_ptr<WeftWork> group_;
  // Splits and shrinks (split.cc): how many children of each kind each set
  // of ranks has had, and the last split's child with the store torch gave
  // it, for torch asking again for the same group on this backend's other
  // device.
  std::mutex split_mu_;
  std::map<std::pair<std::string, std::vector<int>>, int> splits_;
  c10::intrusive_ptr<c10d::Store> split_store_;
  c10::weak_intrusive_ptr<c10d::Backend> split_child_{c10::intrusive_ptr<c10d::Backend>()};
};

}  // namespace weft_c10d

#endif  // WEFT_PYTHON_C10D_BACKEND_H_
