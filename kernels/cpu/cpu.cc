// Host kernels: run each segment (or tensor) whole on the calling thread, or,
// for large calls with a thread pool to use, cut the work into tasks of about
// kTaskBytes and share them out.
//
// A task is a range of "pieces"; a piece is a whole small segment (or tensor)
// or a slice of a large one, so 10,000 tiny tensors make a few dozen tasks and
// one huge tensor is spread over every thread. The piece lists live in
// per-thread scratch (or in a PreparedCopy made once for a fixed layout), so
// steady-state calls do not allocate.
#include "kernels/cpu/cpu.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/reference/convert.h"

namespace weft {
namespace kernels {
namespace cpu {
namespace {

constexpr size_t kTaskBytes = size_t{256} << 10;
// Below this a call stays on the calling thread: waking workers costs more.
constexpr size_t kInlineBytes = size_t{1} << 20;
// Destinations larger than this are written with non-temporal stores: they
// would not stay in cache anyway, and streaming saves reading each line
// before it is overwritten.
constexpr size_t kStreamBytes = size_t{32} << 20;
// How many segments ahead the conversion loop prefetches (as copy_bits does).
constexpr size_t kPrefetchAhead = 4;

struct Piece {
  size_t item;   // segment or tensor index
  size_t begin;  // first element
  size_t count;
};

struct Tasks {
  std::vector<Piece> pieces;
  std::vector<size_t> begin;  // task t is pieces [begin[t], begin[t + 1])
};

Tasks& ThreadTasks() {
  thread_local Tasks tasks;
  return tasks;
}

bool Parallel(size_t bytes) { return bytes >= kInlineBytes && ThreadPool::Default().threads() > 1; }

// Splits items of count(i) elements into pieces of at most slice(i) elements
// and groups consecutive pieces into tasks of about kTaskBytes.
template <typename Count, typename Bytes, typename Slice>
Tasks& MakeTasks(size_t items, Count count, Bytes bytes_per_element, Slice slice) {
  Tasks& t = ThreadTasks();
  t.pieces.clear();
  t.begin.assign(1, 0);
  size_t task_bytes = 0;
  for (size_t i = 0; i < items; ++i) {
    const size_t n = count(i);
    const size_t step = slice(i);
    for (size_t b = 0; b < n; b += step) {
      const size_t c = std::min(step, n - b);
      t.pieces.push_back({i, b, c});
      task_bytes += c * bytes_per_element(i);
      if (task_bytes >= kTaskBytes) {
        t.begin.push_back(t.pieces.size());
        task_bytes = 0;
      }
    }
  }
  if (t.begin.back() != t.pieces.size()) t.begin.push_back(t.pieces.size());
  return t;
}

// Pieces of a large item: at least kTaskBytes, and no more than one per
// thread, so that each memcpy/convert call stays long (memcpy picks its
// fastest strategy by length) while every thread gets a share.
size_t SliceOf(size_t count, size_t bytes_per_element) {
  const size_t threads = static_cast<size_t>(ThreadPool::Default().threads());
  return std::max(kTaskBytes / bytes_per_element, (count + threads - 1) / threads);
}

template <typename Fn>
void RunTasks(const Tasks& t, Fn fn) {
  ThreadPool::Default().ParallelFor(t.begin.size() - 1, [&](size_t task) {
    for (size_t p = t.begin[task]; p < t.begin[task + 1]; ++p) fn(t.pieces[p]);
  });
}

template <typename P>
P* Offset(P* p, size_t elements, DataType t) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<Byte*>(p) + elements * FloatSize(t);
}

}  // namespace

const char* IsaName() { return BestIsa().name; }

namespace {

// What every copy needs to know about its segments before it runs.
struct Shape {
  size_t bytes = 0;    // read + written
  size_t written = 0;
  bool uniform = true;
  DataType src_t = DataType::kFloat32, dst_t = DataType::kFloat32;
};

Shape ShapeOf(absl::Span<const Segment> segments) {
  Shape sh;
  if (!segments.empty()) {
    sh.src_t = segments[0].src_t;
    sh.dst_t = segments[0].dst_t;
  }
  for (const Segment& s : segments) {
    const size_t written = s.count * FloatSize(s.dst_t);
    sh.bytes += s.count * FloatSize(s.src_t) + written;
    sh.written += written;
    sh.uniform &= s.src_t == sh.src_t && s.dst_t == sh.dst_t;
  }
  return sh;
}

// The loop every copy ends in. Segments of one type pair (a bucket of
// float32 gradients) decide the conversion once, so a tiny segment costs a
// few vector moves (bit copies) or one call of the resolved loop.
void RunSegments(absl::Span<const Segment> segments, const Shape& sh, float scale, bool accumulate, bool stream) {
  const Isa& isa = BestIsa();
  if (sh.uniform) {
    const size_t dst_size = FloatSize(sh.dst_t);
    if (reference::IsBitCopy(sh.src_t, sh.dst_t, scale, accumulate)) {
      isa.copy_bits(segments.data(), segments.size(), dst_size);
      return;
    }
    if (const RunFn fn = isa.pick(sh.src_t, sh.dst_t, accumulate, stream)) {
      for (size_t i = 0; i < segments.size(); ++i) {
        const Segment& s = segments[i];
        if (i + kPrefetchAhead < segments.size()) {
          // Separate tensors are separate streams to the hardware prefetcher: start the next ones early.
          const Segment& next = segments[i + kPrefetchAhead];
          if (next.src != nullptr) __builtin_prefetch(next.src);
          __builtin_prefetch(next.dst, 1);
        }
        if (s.src != nullptr) {
          fn(s.src, s.dst, s.count, scale);
        } else {
          std::memset(s.dst, 0, s.count * dst_size);  // chunk-cat padding: +0 in every type
        }
      }
      return;
    }
  }
  for (const Segment& s : segments) isa.convert(s.src, s.src_t, s.dst, s.dst_t, s.count, scale, accumulate, stream);
}

Shape ShapeOf(const PreparedCopy& copy) {
  Shape sh;
  sh.uniform = copy.uniform;
  sh.src_t = copy.src_t;
  sh.dst_t = copy.dst_t;
  return sh;
}

PreparedCopy& ThreadPrepared() {
  thread_local PreparedCopy prepared;
  return prepared;
}

}  // namespace

void Prepare(absl::Span<const Segment> segments, PreparedCopy& out) {
  const Shape sh = ShapeOf(segments);
  out.stream = sh.written >= kStreamBytes;
  out.uniform = sh.uniform;
  out.src_t = sh.src_t;
  out.dst_t = sh.dst_t;
  out.pieces.clear();
  out.tasks.clear();
  if (!Parallel(sh.bytes)) {
    out.pieces.assign(segments.begin(), segments.end());
    return;
  }
  out.tasks.push_back(0);
  size_t task_bytes = 0;
  for (const Segment& s : segments) {
    const size_t bytes_per_element = FloatSize(s.src_t) + FloatSize(s.dst_t);
    const size_t step = SliceOf(s.count, bytes_per_element);
    for (size_t b = 0; b < s.count; b += step) {
      const size_t c = std::min(step, s.count - b);
      const void* src = s.src == nullptr ? nullptr : Offset(s.src, b, s.src_t);
      out.pieces.push_back({src, s.src_t, Offset(s.dst, b, s.dst_t), s.dst_t, c});
      task_bytes += c * bytes_per_element;
      if (task_bytes >= kTaskBytes) {
        out.tasks.push_back(out.pieces.size());
        task_bytes = 0;
      }
    }
  }
  if (out.tasks.back() != out.pieces.size()) out.tasks.push_back(out.pieces.size());
}

void Run(const PreparedCopy& copy, float scale, bool accumulate) {
  const Shape sh = ShapeOf(copy);
  if (copy.tasks.empty()) {
    RunSegments(copy.pieces, sh, scale, accumulate, copy.stream);
    return;
  }
  ThreadPool::Default().ParallelFor(copy.tasks.size() - 1, [&](size_t t) {
    const absl::Span<const Segment> task(copy.pieces.data() + copy.tasks[t], copy.tasks[t + 1] - copy.tasks[t]);
    RunSegments(task, sh, scale, accumulate, copy.stream);
  });
}

void Copy(absl::Span<const Segment> segments, float scale, bool accumulate) {
  const Shape sh = ShapeOf(segments);
  if (!Parallel(sh.bytes)) {
    RunSegments(segments, sh, scale, accumulate, sh.written >= kStreamBytes);
    return;
  }
  PreparedCopy& prepared = ThreadPrepared();
  Prepare(segments, prepared);
  Run(prepared, scale, accumulate);
}

void UnscaleCheckFinite(absl::Span<const TensorRef> tensors, float inv_scale, int* found_inf) {
  const Isa& isa = BestIsa();
  auto bytes = [&](size_t i) { return 2 * FloatSize(tensors[i].dtype); };
  size_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) total += tensors[i].count * bytes(i);
  std::atomic<bool> found{false};
  auto run = [&](const TensorRef& t, size_t begin, size_t count) {
    if (isa.unscale(Offset(t.data, begin, t.dtype), t.dtype, count, inv_scale)) {
      found.store(true, std::memory_order_relaxed);
    }
  };
  if (!Parallel(total)) {
    for (const TensorRef& t : tensors) run(t, 0, t.count);
  } else {
    const Tasks& t = MakeTasks(
        tensors.size(), [&](size_t i) { return tensors[i].count; }, bytes,
        [&](size_t i) { return SliceOf(tensors[i].count, bytes(i)); });
    RunTasks(t, [&](const Piece& p) { run(tensors[p.item], p.begin, p.count); });
  }
  if (found.load()) *found_inf = 1;
}

void L2Norm(absl::Span<const TensorRef> tensors, float* norms, float* total) {
  const Isa& isa = BestIsa();
  size_t bytes = 0;
  for (const TensorRef& t : tensors) bytes += t.count * FloatSize(t.dtype);
  auto block = [&](const TensorRef& t, size_t begin, size_t count) {
    return isa.block_sum_of_squares(Offset(t.data, begin, t.dtype), t.dtype, count);
  };
  // Either way each tensor's sum adds its norm blocks (kernels/types.h) in
  // block order, so the result does not depend on how the work was shared.
  double all = 0.0;
  auto finish = [&](size_t i, double sum) {
    if (norms != nullptr) norms[i] = static_cast<float>(std::sqrt(sum));
    all += sum;
  };
  if (!Parallel(bytes)) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      double sum = 0.0;
      for (size_t b = 0; b < tensors[i].count; b += kNormBlock) {
        sum += block(tensors[i], b, std::min(kNormBlock, tensors[i].count - b));
      }
      finish(i, sum);
    }
  } else {
    // One piece per norm block; the block sums are combined afterwards, in order.
    const Tasks& t = MakeTasks(
        tensors.size(), [&](size_t i) { return tensors[i].count; },
        [&](size_t i) { return FloatSize(tensors[i].dtype); }, [](size_t) { return kNormBlock; });
    thread_local std::vector<double> scratch;
    std::vector<double>& block_sum = scratch;  // the caller's: workers must not name their own
    block_sum.resize(t.pieces.size());
    RunTasks(t, [&](const Piece& p) {
      block_sum[static_cast<size_t>(&p - t.pieces.data())] = block(tensors[p.item], p.begin, p.count);
    });
    std::vector<double> sum(tensors.size(), 0.0);
    for (size_t k = 0; k < t.pieces.size(); ++k) sum[t.pieces[k].item] += block_sum[k];
    for (size_t i = 0; i < tensors.size(); ++i) finish(i, sum[i]);
  }
  *total = static_cast<float>(std::sqrt(all));
}

}  // namespace cpu
}  // namespace kernels
}  // namespace weft
