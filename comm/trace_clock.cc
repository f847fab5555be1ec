#include "comm/trace_clock.h"

#include <cstdint>
#include <limits>

#include "core/status.h"
#include "core/trace.h"

namespace weft {
namespace {

absl::Status Ping(Communicator& c, trace::Sink& sink) {
  constexpr DataType kWord = DataType::kInt64;
  if (c.rank() == 0) {
    for (int r = 1; r < c.size(); ++r) {
      for (int k = 0; k < kTraceClockRounds; ++k) {
        int64_t t0 = 0;
        RETURN_IF_ERROR(c.Recv(&t0, 1, kWord, r, nullptr));
        const int64_t t1 = trace::NowNs();
        RETURN_IF_ERROR(c.Send(&t1, 1, kWord, r, nullptr));
      }
    }
    sink.SetClock(0, 0, 0, "reference (rank 0)");
    return absl::OkStatus();
  }
  int64_t best_rtt = std::numeric_limits<int64_t>::max(), offset = 0;
  for (int k = 0; k < kTraceClockRounds; ++k) {
    const int64_t t0 = trace::NowNs();
    RETURN_IF_ERROR(c.Send(&t0, 1, kWord, 0, nullptr));
    int64_t t1 = 0;
    RETURN_IF_ERROR(c.Recv(&t1, 1, kWord, 0, nullptr));
    const int64_t t2 = trace::NowNs();
    if (t2 - t0 < best_rtt) {
      best_rtt = t2 - t0;
      offset = t0 + (t2 - t0) / 2 - t1;
    }
  }
  sink.SetClock(offset, best_rtt, kTraceClockRounds, "NTP-style min-RTT ping to rank 0 over the communicator");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> AlignTraceClock(absl::StatusOr<std::unique_ptr<Communicator>> world) {
  if (!trace::On() || !world.ok()) return world;
  Communicator& c = **world;
  trace::Sink* sink = c.trace();
  if (sink == nullptr) return world;
  if (c.memory() != MemKind::kHost) {
    // A CUDA world's sends take device buffers; its ranks keep their own clocks.
    sink->SetClock(0, 0, 0, "none (a CUDA world: clocks not aligned)");
    return world;
  }
  if (c.size() == 1) {
    sink->SetClock(0, 0, 0, "reference (rank 0)");
    return world;
  }
  trace::Span span(sink, "clock_sync", "init");
  absl::Status s = Ping(c, *sink);
  if (!s.ok()) {
    return Annotate(s, absl::StrFormat("rank %d aligning its trace clock with rank 0's (WEFT_TRACE)", c.rank()));
  }
  return world;
}

}  // namespace weft
