// The DDP reducer: bucketed gradient all-reduce overlapped with backward.
//
// What PyTorch DDP's Reducer, Horovod's tensor fusion and Megatron's grad
// buffer do, framework-agnostic. The framework registers its gradients once;
// during each backward it calls MarkReady as each gradient is produced (from
// any thread, in any order); the reducer copies a bucket in (the flatten
// kernel, with the division by the world size fused) as its gradients come
// in and all-reduces it on its own stream while backward goes on; Finalize
// has the averages copied back (unflatten). On host memory that stream is a
// HostStream working one cache-sized segment at a time, and Finalize waits
// for it; on CUDA memory it is a CUDA stream ordered after the callers'
// streams by events, and Finalize makes the caller's stream wait for it
// without any host wait (shard/reducer_device.h).
//
//   ASSIGN_OR_RETURN(auto r, Reducer::Create(comm, grads, ReducerOptions{}));  // collective
//   for each step:
//     ... backward: r->MarkReady(i, grad_i, nullptr) as each grad is produced ...
//     RETURN_IF_ERROR(r->Finalize(nullptr));  // every marked grad holds the average
//
// Names used below:
//   bucket    a range of gradients sharing one buffer (shard/bucket_plan.h);
//   segment   one collective call's piece of a bucket (CutSegments in
//             shard/bucket_plan.h): a gradient of the bucket's type and at
//             least segment_bytes alone (it is ready all at once, so cutting
//             it would only add calls), else consecutive gradients cut into
//             pieces of segment_bytes, copied and reduced while in cache;
//   pending   per segment, how many gradients overlapping it are not in yet;
//   launch    copy-in + all-reduce + copy-out of a segment, enqueued on the
//             comm stream as soon as its gradients are in. Segments launch
//             strictly in order (bucket by bucket) on every rank: segment
//             k+1 waits for segment k even when its gradients are all in, so
//             every rank issues the same collectives in the same order
//             whatever order its gradients arrive in;
//   expected  marks a gradient gets per backward: 1, or with static_graph the
//             count observed in the first backward (activation checkpointing
//             marks a gradient once per recomputation);
//   view      gradient-as-bucket-view: the framework makes each gradient a
//             view of its slot (GradSlot), so there is nothing to copy;
//   merge     host, views: a segment's call reduces every later segment of
//             its bucket (in-process: and of the next buckets of its dtype)
//             that all ranks have ready when it runs, and the calls it
//             covered do nothing (merge_ready_segments,
//             DirectReduce::AllReduceReady);
//   in place  host, separate buffers: a segment lying wholly inside one
//             gradient (of the bucket's type, not float16) is averaged in
//             the gradient's own memory instead of copied in and out, so a
//             marked gradient may change before Finalize returns.
//
// The division by the world size N: with separate buffers the copy-in scales
// by 1/N and the all-reduce sums; with float16 communication 1/sqrt(N) before
// the sum and 1/sqrt(N) in the copy-out, so a sum of N large gradients does
// not overflow float16; in view mode, and on segments that lie wholly inside
// one gradient, the all-reduce averages.
#ifndef WEFT_SHARD_REDUCER_H_
#define WEFT_SHARD_REDUCER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "comm/direct.h"
#include "core/device_runtime.h"
#include "core/stream.h"
#include "shard/bucket_plan.h"
#include "shard/reducer_device.h"

namespace weft {
namespace shard {

struct ReducerOptions {
  size_t bucket_cap_bytes = size_t{25} << 20;
  size_t first_bucket_cap_bytes = size_t{1} << 20;
  std::optional<DataType> comm_dtype;  // float16 or bfloat16 compression; empty: the gradients' own
  bool find_unused = false;            // all-reduce a used-bitmap; unmarked grads count as unused
  bool static_graph = false;           // count the marks of the first backward and expect them after
  bool rebuild_buckets = true;         // re-plan once from rank 0's ready order after the first backward
  bool gradient_as_bucket_view = false;
  // Host memory: each bucket's copy-in, all-reduce and copy-out run in
  // pieces of this size, so each piece is copied and reduced while in
  // cache; a gradient this large that needs no copy is one piece of its own.
  // CUDA memory: a bucket is one piece (NCCL pipelines it itself).
  size_t segment_bytes = size_t{2} << 20;
  // Host memory, separate buffers, on a backend that reduces a buffer in
  // pieces (DirectReduce::ReducesPieces: in-process ranks, MPI or UCX ranks
  // on one node): a segment is averaged straight from and into its
  // gradients, with no copy into the bucket and back. Off: the copy plans,
  // as elsewhere.
  bool reduce_in_pieces = true;
  // Only segments whose gradients average at least this many bytes go in
  // pieces: each piece costs the backend a few calls per chunk or round,
  // where a copy plan moves many tiny gradients in one pass.
  size_t min_piece_bytes = 4096;
  // Host memory, gradient as bucket view, on a backend whose ranks agree on
  // what is ready within the call (DirectReduce::AgreesReadyInCall:
  // in-process ranks, MPI or UCX ranks on one node): each segment's
  // all-reduce reaches as far into its bucket as every rank has filled when
  // it runs (DirectReduce::AllReduceReady), and the segments queued behind it that
  // it covered cost nothing. Only a reducer that has fallen behind merges:
  // when backward outpaces the collectives, as with no compute between
  // gradients, a bucket goes in one call instead of one per segment. Where
  // a ready buffer in parts costs what one does (in-process ranks:
  // DirectReduce::ReducesReadyParts) the call runs on into the next buckets
  // of the same dtype too.
  bool merge_ready_segments = true;
};

// Time the comm stream spent on bucket work (copy-in, all-reduce, copy-out).
struct ReducerStats {
  double comm_seconds = 0;  // since the last ResetStats; host memory only (0 on CUDA)
  int64_t buckets_launched = 0;  // buckets whose last segment was launched (empty ones have none)
  int64_t segments_launched = 0;  // segments launched (CUDA: a bucket is one segment)
  // Launches that had to make their segment's copy plans (copy-in and
  // copy-out) because the gradient pointers differed from those the plans
  // were made for; stays flat while the framework reuses its buffers. CUDA:
  // only pointers that also came in at the bucket's previous launch get
  // plans (shard/reducer_state.h, SegmentCopies); others run one-shot copies.
  int64_t copy_plans_built = 0;
  // Host memory, separate buffers: segments averaged inside their gradient
  // (shard/reducer.h, "in place"), with no copy in or out.
  int64_t segments_in_place = 0;
  // Host memory, separate buffers: segments of several gradients averaged
  // straight from and into them (ReducerOptions::reduce_in_pieces).
  int64_t segments_in_pieces = 0;
  // Host memory, gradient as bucket view: segments whose all-reduce found
  // them already reduced by an earlier segment's call, which every rank had
  // them ready for (ReducerOptions::merge_ready_segments).
  int64_t segments_merged = 0;
};

struct CopyList;
struct SegmentCopies;

class Reducer {
 public:
  // Collective over `comm` (which must outlive the reducer): compares every
  // rank's gradient list and options, then plans. A mismatch is InvalidUsage
  // naming the first differing gradient and the ranks that disagree. A CUDA
  // communicator's reducer lives on comm->options().cuda_device, or when
  // that is -1 on the device current at the call; without CUDA (or without a
  // usable device) it is Unsupported with the reason.
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(Communicator* comm, std::vector<GradSpec> grads,
                                                         const ReducerOptions& options);
  ~Reducer();  // waits for launched work
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // `grad` holds grads[index] (count elements of its dtype) and must stay
  // valid and unchanged until Finalize returns, and is not to be read before
  // then (host: parts of it may be averaged in place). Any thread. Host
  // memory: `stream` must be nullptr. CUDA memory: `stream` (a cudaStream_t, nullptr
  // for the legacy default stream) is where `grad` is produced; the reducer
  // reads it only after the work enqueued there so far.
  absl::Status MarkReady(int index, void* grad, void* stream);
  // This gradient takes no part in this backward: its slot is zero-filled
  // (CUDA, view mode: after the work on the stream last given to MarkReady
  // or Finalize, since the slot is the framework's gradient).
  absl::Status MarkUnused(int index);
  // Every grad passed to MarkReady holds the average: host memory, when it
  // returns; CUDA memory, for work enqueued on `stream` after the call (the
  // host waits only in find-unused mode, for the used-bitmap, and at the
  // one rebuild). Refused (nothing changes) when gradients are missing
  // outside find-unused mode.
  absl::Status Finalize(void* stream);
  // sync = false: MarkReady/Finalize communicate nothing (the framework
  // accumulates); refused in the middle of a backward.
  absl::Status SetSync(bool sync);

  int num_grads() const { return static_cast<int>(grads_.size()); }
  int num_buckets() const;
  // Bucket b's dtype (the communication dtype); b in [0, num_buckets()).
  absl::StatusOr<DataType> bucket_dtype(int b) const;
  // The gradient's slot in its bucket (count elements of the bucket type).
  // Changes when the buckets are rebuilt: see layout_version().
  absl::StatusOr<void*> GradSlot(int index) const;
  absl::StatusOr<int> GradBucket(int index) const;
  // After a Finalize in find-unused mode: whether any rank used the gradient.
  // InvalidUsage without find_unused (nothing tracks it).
  absl::StatusOr<bool> GradUsed(int index) const;
  // Incremented each time the buckets are re-planned.
  int layout_version() const;
  ReducerStats stats() const;
  void ResetStats();

 private:
  struct Buffer;
  struct BucketState;
  struct StatsBox;
  Reducer(Communicator* comm, std::vector<GradSpec> grads, const ReducerOptions& options,
          std::unique_ptr<DeviceSide> dev);

  // All below run under mu_.
  absl::Status EnterDevice(std::optional<DeviceScope>& on) const;  // CUDA: the reducer's device, for a call
  absl::Status Layout(const PlanOptions& plan_options);  // (re)plans and allocates buffers
  absl::Status CheckIndex(int index) const;
  // Refuses grad for gradient `index` when its memory overlaps a bucket but
  // is not its own slot.
  absl::Status CheckMemory(int index, const void* grad) const;
  void SlotIn(int g);     // gradient g is in: its segments' pending--, launch what is ready
  void LaunchReady();     // launches segments in order while the next one is complete
  // Host, view mode: segment k of bucket b takes its bytes from a copy-in
  // (a gradient that is not its slot), so it is filled only once that runs.
  bool FilledByCopy(int b, size_t k);
  void Launch(int b, size_t k);  // enqueues segment k of bucket b: copy-in, all-reduce, copy-out
  void Pieces(int b, size_t k, CopyList& part) const;  // the marked gradients' pieces inside segment k
  const SegmentCopies& Copies(int b, size_t k);  // host: segment k's plans or pieces, rebuilt if the pointers changed
  void MakeCopies(int b, size_t k, SegmentCopies& c);  // c's plans for the pointers marked now
  void* CopyKey(int b, size_t s) const;  // slot s's pointer in its segments' plan key
  void RetireCopies(SegmentCopies& c);   // drops c's plans (CUDA: to dev_, see DeviceSide::Retire)
  void LaunchOnHost(int b, size_t k, unsigned char* at, size_t n);
  // c.pieces for the pointers marked now.
  void MakePieces(int b, size_t k, SegmentCopies& c);
  void LaunchOnDevice(int b, unsigned char* at, size_t n);
  void ZeroSlot(int g);                 // a gradient that took no part contributes zeros
  void RestoreUnusedEverywhere();       // after the used-bitmap: view mode's unused slots get their values back
  // Bucket memory, in place: memset/memcpy on host, on the comm stream on CUDA.
  absl::StatusOr<std::unique_ptr<Buffer>> NewBuffer(size_t bytes);
  absl::Status Zero(void* p, size_t bytes);
  absl::Status CopyBytes(void* dst, const void* src, size_t bytes);
  void Note(const absl::Status& s);     // keeps the first error of work launched in this backward
  void* CommStream() const;             // CUDA: the comm stream; host: nullptr
  absl::Status Rebuild();  // collective: rank 0's ready order to all, re-plan
  void ResetIteration();
  std::string Labels(const std::vector<int>& grads) const;
  void* SlotPtr(int g) const;

  Communicator* const comm_;
  DirectReduce* const direct_;  // comm_'s direct-buffer reductions, asked for once; null where not offered
  const std::vector<GradSpec> grads_;
  const ReducerOptions options_;

  mutable std::mutex mu_;
  // CUDA memory only (else null); before every member holding its memory,
  // so it is destroyed after them.
  std::unique_ptr<DeviceSide> dev_;
  BucketPlan plan_;
  std::vector<std::unique_ptr<BucketState>> buckets_;
  int layout_version_ = 0;
  bool sync_ = true;
  bool rebuilt_ = false;
  int iterations_ = 0;  // finalized synced backwards
  absl::Status launch_error_;

  // Per gradient, this backward.
  std::vector<void*> ptr_;
  std::vector<int> marks_;
  std::vector<int> expected_;     // 1; with static_graph, learned in the first backward
  std::vector<uint8_t> used_;     // in (marked ready); all-reduced with max in find-unused mode
  std::vector<uint8_t> unused_;   // MarkUnused'd (or missing at a find-unused Finalize)
  std::vector<uint8_t> used_anywhere_;  // the last find-unused Finalize's verdict
  std::vector<std::unique_ptr<Buffer>> saved_;  // view + find-unused: zeroed slots' old values
  void* last_stream_ = nullptr;   // CUDA: the stream last given to MarkReady or Finalize
  std::vector<int> ready_order_;  // gradients in the order they came in
  int next_bucket_ = 0;  // the next segment to launch: (bucket, segment)
  size_t next_segment_ = 0;
  std::vector<std::pair<int, size_t>> launching_;  // LaunchReady's scratch: the segments it launches now
  bool active_ = false;  // a backward is in progress: something was marked

  std::shared_ptr<StatsBox> stats_;
  // Host memory only (a CUDA reducer has no host thread); last member:
  // destroyed (drained) first.
  std::optional<HostStream> stream_;
};

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_REDUCER_H_
