// The reducer's private pieces, shared by its two source files
// (reducer.cc: the calls; reducer_buckets.cc: buffers and bucket work).
#ifndef WEFT_SHARD_REDUCER_STATE_H_
#define WEFT_SHARD_REDUCER_STATE_H_

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/copy_plan.h"
#include "kernels/kernels.h"
#include "shard/reducer.h"
#include "shard/segment_plan.h"

namespace weft {
namespace shard {

// A bucket's memory: 64-byte aligned (host) or the device pool's alignment
// (256 bytes on CUDA), zero-filled once, so alignment gaps and padding
// contribute zeros to every all-reduce. Device memory is taken and returned
// on the comm stream of `dev`, which must outlive the buffer.
struct Reducer::Buffer {
  static constexpr size_t kAlign = 64;
  static absl::StatusOr<std::unique_ptr<Buffer>> Make(size_t n, DeviceSide* dev);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  size_t bytes = 0;
  unsigned char* data = nullptr;
  DeviceSide* dev = nullptr;  // null: host memory

 private:
  Buffer() = default;
};

// A segment's copy-in and copy-out, checked once (kernels/copy_plan.h: on
// host memory cut into tasks, on CUDA memory a launch table uploaded to the
// device) and reused while the same gradient pointers come in. Frameworks
// may hand a gradient in fresh memory any step (PyTorch's
// zero_grad(set_to_none=True)), so before each launch the pointers marked
// this backward are compared with `ptrs`, one per slot overlapping the
// segment: any difference (a new address, a view, an unused gradient)
// rebuilds both. Dtypes, the bucket buffer and its scales are fixed for the
// life of the bucket (a rebuild makes new buckets; scales are given at each
// Run), so the pointers are the whole key. The same holds for a segment
// reduced in pieces (`pieces`), checked once (DirectReduce::CheckPieces).
//
// CUDA (a bucket is one segment): making a device plan costs a host wait
// (kernels/cuda/copy.cu uploads the table with cudaMemcpy and waits for the
// legacy default stream, where frameworks run backward), so plans are made
// only for pointers that `seen` also held, those of the bucket's previous
// launch; other launches run the one-shot kernels. Pointers that change
// every step thus cost what they did before plans, and steady ones one
// build. Replaced device plans go to DeviceSide::Retire, not to their
// destructor, which would wait for the whole device.
struct SegmentCopies {
  std::vector<void*> ptrs;  // what the slots' pointers were when built
  std::vector<void*> seen;  // CUDA: what they were at the last launch, planned or not
  bool built = false;
  kernels::CopyPlan in;     // the gradients' pieces into the segment
  kernels::CopyPlan out;    // and back out
  // Instead of the plans, where the segment is reduced in pieces
  // (SegmentWay::kPieces): straight from and into the gradients, checked.
  PieceList pieces;

  // Whether `v` holds key(s) for the slots s in [first, end).
  template <class Key>
  static bool Holds(const std::vector<void*>& v, size_t first, size_t end, const Key& key) {
    if (v.size() != end - first) return false;
    for (size_t s = first; s < end; ++s) {
      if (v[s - first] != key(s)) return false;
    }
    return true;
  }
  template <class Key>
  static void Fill(std::vector<void*>& v, size_t first, size_t end, const Key& key) {
    v.clear();
    for (size_t s = first; s < end; ++s) v.push_back(key(s));
  }
};

// A bucket, or consecutive buckets of one dtype, as a ReadyBuffer
// (ReducerOptions::merge_ready_segments): which of its segments hold this
// rank's input, and the prefix they make, shared by the caller's launches
// (segments of views are filled when launched) and the comm stream's
// copy-ins (segments with a copy are filled when it runs).
struct ReadyFill {
  std::shared_ptr<ReadyBuffer> buf;  // the buckets' memory as its parts
  int first = 0;                     // its first bucket
  std::vector<size_t> seg_end;  // per segment of its buckets, in the buffer's elements
  std::mutex mu;
  std::vector<char> filled;  // per segment, this backward
  size_t upto = 0;           // segments [0, upto) are filled

  // Idempotent; moves the buffer's ready extent over every filled segment
  // that now follows the prefix.
  void Filled(size_t k) {
    std::lock_guard<std::mutex> lock(mu);
    filled[k] = 1;
    const size_t before = upto;
    while (upto < filled.size() && filled[upto]) ++upto;
    if (upto != before) buf->SetReady(seg_end[upto - 1]);
  }
  // Between backwards, with no call pending.
  void Reset() {
    std::lock_guard<std::mutex> lock(mu);
    std::fill(filled.begin(), filled.end(), 0);
    upto = 0;
    buf->Reset();
  }
};

// A bucket: its plan (shard/segment_plan.h: segments, their ways and math,
// the slot maps) and what a backward changes.
struct Reducer::BucketState : BucketSegments {
  Bucket layout;
  std::unique_ptr<Buffer> buf;
  std::vector<int> seg_pending;       // per segment: gradients overlapping it not in yet this backward
  std::vector<SegmentCopies> copies;  // per segment
  std::shared_ptr<ReadyFill> fill;    // ready segments: the chain's buffer (ready_first's), else null
};

struct Reducer::StatsBox {
  std::mutex mu;
  ReducerStats value;
};

// Tensors and slot offsets for one flatten or unflatten, kept alive by the
// stream task that uses them.
struct CopyList {
  std::vector<kernels::TensorRef> tensors;
  std::vector<size_t> offsets;
};

PlanOptions PlanOptionsFor(const ReducerOptions& o);

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_REDUCER_STATE_H_
