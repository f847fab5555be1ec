// Aligns a new world's timeline clocks (core/trace.h) with rank 0's.
//
// Steady clocks of different hosts have unrelated origins, so each rank
// measures its offset to rank 0 the way NTP does: it sends its time t0,
// rank 0 answers with its own t1, and the answer arrives at t2. Rank 0's
// clock read t1 at about (t0 + t2) / 2 on this rank's, give or take half
// the round trip, so of several rounds the one with the shortest round trip
// gives the offset. Rank 0 answers the ranks one after another; the pings
// are ordinary sends and receives on the world, before it is returned, so
// every rank takes part before any user call. A no-op without WEFT_TRACE.
#ifndef WEFT_COMM_TRACE_CLOCK_H_
#define WEFT_COMM_TRACE_CLOCK_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace weft {

inline constexpr int kTraceClockRounds = 8;

// `world` with its clock aligned, or the first error of the pings.
absl::StatusOr<std::unique_ptr<Communicator>> AlignTraceClock(absl::StatusOr<std::unique_ptr<Communicator>> world);

}  // namespace weft

#endif  // WEFT_COMM_TRACE_CLOCK_H_
