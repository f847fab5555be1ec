// Cross-rank check of the reducer's (or sharder's) plan inputs, made at
// creation so that ranks which would plan different buckets fail with a
// message instead of deadlocking in mismatched all-reduces later.
//
// Every rank contributes a fixed header (whether its own arguments were
// valid, the gradient count, the option words) and then each gradient's
// count, dtype and memory kind; everyone receives everything (two
// all-gathers), so all ranks return the same verdict.
//
//   RETURN_IF_ERROR(CheckSamePlanInputs(*comm, grads, {cap, first_cap}, local_status));
#ifndef WEFT_SHARD_PLAN_CHECK_H_
#define WEFT_SHARD_PLAN_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "shard/bucket_plan.h"

namespace weft {
namespace shard {

inline constexpr int kPlanOptionWords = 6;

// Collective. `local` is this rank's own verdict on its arguments: a rank
// that refused them still takes part, so the others fail too instead of
// waiting for it. Returns `local` on the rank that refused, and InvalidUsage
// naming the first differing gradient (or option) and the disagreeing ranks
// when the inputs differ.
absl::Status CheckSamePlanInputs(Communicator& comm, absl::Span<const GradSpec> grads,
                                 absl::Span<const int64_t> option_words, absl::Span<const char* const> option_names,
                                 const absl::Status& local);

}  // namespace shard
}  // namespace weft

#endif  // WEFT_SHARD_PLAN_CHECK_H_
