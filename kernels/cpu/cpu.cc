// Host kernels: cut the work into tasks of about kTaskBytes, run them on the
// thread pool, combine. Small calls stay on the calling thread, where waking
// workers would cost more than the copy.
//
// A task is a range of "pieces"; a piece is a whole small segment (or tensor)
// or a kTaskBytes slice of a large one, so 10,000 tiny tensors make a few
// dozen tasks and one huge tensor is spread over every thread.
#include "kernels/cpu/cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace weft {
namespace kernels {
namespace cpu {
namespace {

constexpr size_t kTaskBytes = size_t{256} << 10;
constexpr size_t kInlineBytes = size_t{1} << 20;

struct Piece {
  size_t item;   // segment or tensor index
  size_t begin;  // first element
  size_t count;
};

// Splits items of `count(i)` elements costing `bytes_per_element(i)` each
// into pieces of at most `slice(i)` elements, and groups consecutive pieces
// into tasks of about kTaskBytes. task_begin has one entry per task plus the end.
template <typename Count, typename Bytes, typename Slice>
void MakeTasks(size_t items, Count count, Bytes bytes_per_element, Slice slice, std::vector<Piece>& pieces,
               std::vector<size_t>& task_begin) {
  size_t task_bytes = 0;
  task_begin.push_back(0);
  for (size_t i = 0; i < items; ++i) {
    const size_t n = count(i);
    const size_t step = slice(i);
    for (size_t b = 0; b < n; b += step) {
      const size_t c = std::min(step, n - b);
      pieces.push_back({i, b, c});
      task_bytes += c * bytes_per_element(i);
      if (task_bytes >= kTaskBytes) {
        task_begin.push_back(pieces.size());
        task_bytes = 0;
      }
    }
  }
  if (task_begin.back() != pieces.size()) task_begin.push_back(pieces.size());
}

// Runs fn(piece) for every piece, in parallel when there is enough work.
template <typename Fn>
void RunTasks(const std::vector<Piece>& pieces, const std::vector<size_t>& task_begin, size_t total_bytes, Fn fn) {
  const size_t tasks = task_begin.size() - 1;
  auto run = [&](size_t t) {
    for (size_t p = task_begin[t]; p < task_begin[t + 1]; ++p) fn(pieces[p]);
  };
  if (total_bytes < kInlineBytes) {
    for (size_t t = 0; t < tasks; ++t) run(t);
    return;
  }
  ThreadPool::Default().ParallelFor(tasks, run);
}

const char* Offset(const void* p, size_t elements, DataType t) {
  return static_cast<const char*>(p) + elements * ElementSize(t);
}

}  // namespace

const char* IsaName() { return BestIsa().name; }

void Copy(absl::Span<const Segment> segments, float scale, bool accumulate) {
  const Isa& isa = BestIsa();
  auto bytes = [&](size_t i) { return ElementSize(segments[i].src_t) + ElementSize(segments[i].dst_t); };
  std::vector<Piece> pieces;
  std::vector<size_t> task_begin;
  MakeTasks(
      segments.size(), [&](size_t i) { return segments[i].count; }, bytes,
      [&](size_t i) { return kTaskBytes / bytes(i); }, pieces, task_begin);
  size_t total = 0;
  for (size_t i = 0; i < segments.size(); ++i) total += segments[i].count * bytes(i);
  RunTasks(pieces, task_begin, total, [&](const Piece& p) {
    const Segment& s = segments[p.item];
    const void* src = s.src == nullptr ? nullptr : Offset(s.src, p.begin, s.src_t);
    void* dst = const_cast<char*>(Offset(s.dst, p.begin, s.dst_t));
    isa.convert(src, s.src_t, dst, s.dst_t, p.count, scale, accumulate);
  });
}

void UnscaleCheckFinite(absl::Span<const TensorRef> tensors, float inv_scale, int* found_inf) {
  const Isa& isa = BestIsa();
  auto bytes = [&](size_t i) { return 2 * ElementSize(tensors[i].dtype); };
  std::vector<Piece> pieces;
  std::vector<size_t> task_begin;
  MakeTasks(
      tensors.size(), [&](size_t i) { return tensors[i].count; }, bytes,
      [&](size_t i) { return kTaskBytes / bytes(i); }, pieces, task_begin);
  size_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) total += tensors[i].count * bytes(i);
  std::atomic<bool> found{false};
  RunTasks(pieces, task_begin, total, [&](const Piece& p) {
    const TensorRef& t = tensors[p.item];
    void* x = const_cast<char*>(Offset(t.data, p.begin, t.dtype));
    if (isa.unscale(x, t.dtype, p.count, inv_scale)) found.store(true, std::memory_order_relaxed);
  });
  if (found.load()) *found_inf = 1;
}

void L2Norm(absl::Span<const TensorRef> tensors, float* norms, float* total) {
  const Isa& isa = BestIsa();
  // One piece per norm block (kernels/types.h), so the partial sums, and
  // therefore the result, do not depend on how pieces are shared out.
  std::vector<Piece> pieces;
  std::vector<size_t> task_begin;
  MakeTasks(
      tensors.size(), [&](size_t i) { return tensors[i].count; },
      [&](size_t i) { return ElementSize(tensors[i].dtype); }, [](size_t) { return kNormBlock; }, pieces,
      task_begin);
  size_t bytes = 0;
  for (const TensorRef& t : tensors) bytes += t.count * ElementSize(t.dtype);
  std::vector<double> block_sum(pieces.size());
  RunTasks(pieces, task_begin, bytes, [&](const Piece& p) {
    const TensorRef& t = tensors[p.item];
    block_sum[static_cast<size_t>(&p - pieces.data())] =
        isa.block_sum_of_squares(Offset(t.data, p.begin, t.dtype), t.dtype, p.count);
  });
  std::vector<double> sum(tensors.size(), 0.0);
  for (size_t k = 0; k < pieces.size(); ++k) sum[pieces[k].item] += block_sum[k];
  double all = 0.0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (norms != nullptr) norms[i] = static_cast<float>(std::sqrt(sum[i]));
    all += sum[i];
  }
  *total = static_cast<float>(std::sqrt(all));
}

}  // namespace cpu
}  // namespace kernels
}  // namespace weft
