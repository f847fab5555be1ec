// Training steps in a loop for the soak (tests/faults): one rank's reducer
// (DDP: gradients marked ready in reverse, Finalize averages them) and its
// shard group (FSDP: Unshard, one micro-batch of gradients reduced into the
// fp32 shard, Reshard), both made once and stepped many times, every result
// checked bit for bit. Gradients are small integers (over 2 or 4 ranks their
// averages are exact), different each step, so a stale buffer shows.
//
//   StepSoak soak(comm);                   // collective
//   RETURN_IF_ERROR(soak.Run(1000));       // collective
#ifndef WEFT_TESTS_FAULTS_SOAK_STEPS_H_
#define WEFT_TESTS_FAULTS_SOAK_STEPS_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "shard/buffer_pool.h"
#include "shard/reducer.h"
#include "shard/shard_group.h"

namespace weft {
namespace soak {

class StepSoak {
 public:
  explicit StepSoak(Communicator* comm) : comm_(comm) {}
  // Collective: makes the reducer and the shard group.
  absl::Status Create();
  // Collective: `steps` reducer steps, then `steps` shard-group steps.
  absl::Status Run(int steps);
  long long reducer_steps() const { return reducer_steps_; }
  long long shard_steps() const { return shard_steps_; }

 private:
  absl::Status ReducerStep();
  absl::Status ShardStep();

  Communicator* const comm_;
  std::unique_ptr<shard::Reducer> reducer_;
  std::vector<std::vector<float>> grads_;
  shard::BufferPool pool_;
  std::unique_ptr<shard::ShardGroup> group_;
  std::vector<std::vector<float>> full_;
  long long reducer_steps_ = 0, shard_steps_ = 0;
};

// This process's resident set, in bytes (/proc/self/statm).
long long ResidentBytes();

}  // namespace soak
}  // namespace weft

#endif  // WEFT_TESTS_FAULTS_SOAK_STEPS_H_
