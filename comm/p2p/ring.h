// The bandwidth-bound schedules of the point-to-point backends (MPI, UCX): a
// segmented ring for reductions and gathers, a segmented chain for broadcast.
//
// Ring, over N ranks: one chunk per rank, many segments per chunk. Chunk c
// is rank c's share of the buffer; lane j is segment j of every chunk (so a
// lane is a small all-reduce of its own, and `window` of them overlap).
//   reduce-scatter phase, steps s = 0..N-2: rank r sends its partial of
//     chunk r-s-1 to rank r+1, receives the partial of chunk r-s-2 from rank
//     r-1 and combines its own input into it. Chunk c is therefore combined
//     in the order c+1, c+2, ..., c-1, c on every run and ends complete on
//     rank c, which rounds it once into the output.
//   all-gather phase, steps N-1+s: rank r forwards chunk r-s of the output
//     to rank r+1 and receives chunk r-s-1 into its output.
// Every rank copies the bits the owner computed, so results agree bit for bit.
// Partials travel in the "wire type": the accumulation type when rounding
// must wait for the end (float16/bfloat16 always, integer avg), otherwise the
// element type (integer sum/prod/max/min wrap identically in either).
//
//   RingSchedule ring(RingSchedule::Args{...});
//   RETURN_IF_ERROR(engine.run(ring, engine.window));   // collectives.h
#ifndef WEFT_COMM_P2P_RING_H_
#define WEFT_COMM_P2P_RING_H_

#include <cstddef>
#include <functional>

#include "comm/p2p/schedule.h"
#include "core/dtype.h"

namespace weft {
namespace p2p {

// n rounded up to a 64-byte cache line: where the schedules place the parts
// of a scratch buffer, so that no two ranks' parts share a line.
inline size_t AlignUp(size_t n) { return (n + 63) / 64 * 64; }

class RingSchedule final : public Schedule {
 public:
  struct Args {
    DataType t;
    RedOp op;                      // ignored unless reduce_scatter
    int rank, size;
    bool reduce_scatter, all_gather;
    const void* in;                // reduce-scatter input: chunk c at in + begin(c) elements
    void* own_out;                 // where the reduce-scatter phase puts chunk `rank`
                                   // (nullptr: its place in `out`)
    void* out;                     // all-gather buffer: chunk c at out + begin(c) elements
    // Chunk c: elements [c * block, (c + 1) * block) (reduce-scatter,
    // all-gather) or, when block == 0, `count` split as evenly as possible.
    size_t count, block;
    size_t segment_bytes;
    int window;
  };

  // Where chunk c begins when `count` elements are split as evenly as
  // possible over `size` ranks (block == 0); c = size gives count.
  static size_t EvenBegin(size_t count, int size, int c);
  // The scratch a schedule with `a` needs (slot buffers and the accumulator).
  static size_t ScratchBytes(const Args& a);
  RingSchedule(const Args& a, void* scratch);

  size_t lanes() const override { return lanes_; }
  int steps() const override { return rs_steps_ + ag_steps_; }
  Transfer Post(size_t lane, int slot, int step) override;
  void Complete(size_t lane, int slot, int step) override;

 private:
  int Mod(int i) const { return ((i % a_.size) + a_.size) % a_.size; }
  size_t Begin(int c) const;
  size_t Length(int c) const;
  // Elements in segment `lane` of chunk c (0 past its end).
  size_t SegLen(int c, size_t lane) const;
  unsigned char* Buf(int slot, int which) const;

  const Args a_;
  unsigned char* const scratch_;
  const size_t es_, ws_;   // element and wire sizes
  const bool wire_accum_;  // partials travel in the accumulation type
  const size_t seg_;       // elements per segment
  const size_t lanes_;
  const size_t slots_;     // lanes in flight at most
  const int rs_steps_, ag_steps_;
  unsigned char* own_out_;
};

// Broadcast down the chain root, root+1, ...: each segment is received from
// the previous rank and then forwarded to the next.
class ChainSchedule final : public Schedule {
 public:
  ChainSchedule(const void* send, void* recv, size_t bytes, int root, int rank, int size, size_t segment_bytes);
  size_t lanes() const override { return lanes_; }
  int steps() const override { return 2; }
  Transfer Post(size_t lane, int slot, int step) override;
  void Complete(size_t, int, int) override {}

 private:
  const unsigned char* src_;  // what this rank forwards: root's sendbuf, else its recvbuf
  unsigned char* recv_;
  size_t bytes_, seg_, lanes_;
  int pos_, size_, prev_, next_;
};

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_RING_H_
