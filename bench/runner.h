// Times and checks one collective at one size, on every rank together:
// nccl-tests' BenchTime, for host memory and weft's C ABI.
//
// A measurement makes one untimed call, meets the other ranks at the
// harness's barrier (bench/harness.h: MPI_COMM_WORLD or a weft communicator
// of its own, never the measured one), then times `iters` calls back to back and divides; the
// per-rank times are combined as -a says. Each call moves its buffers along
// by one message (wrapping within the -e sized allocation), as nccl-tests
// does, so mid-sized messages are not timed hot in cache. A size is measured
// out of place, then in place, then (with --baseline mpi, MPI-launched) as
// the raw MPI collective on the same buffers, so the two are timed minutes apart at most
// under the same load.
//
//   ASSIGN_OR_RETURN(auto runner, Runner::Create(options, world));
//   RETURN_IF_ERROR(runner->Warmup(weftFloat32, weftSum));
//   ASSIGN_OR_RETURN(Row row, runner->Run(1 << 20, weftFloat32, weftSum));
#ifndef WEFT_BENCH_RUNNER_H_
#define WEFT_BENCH_RUNNER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/args.h"
#include "bench/collectives.h"
#include "bench/harness.h"
#include "weft/weft.h"

namespace weft_bench {

struct Measurement {
  double seconds = 0;     // per call, combined over ranks (-a)
  double algbw = 0;       // GB/s
  double busbw = 0;
  long long wrong = -1;   // wrong elements over all ranks; -1: not checked
  bool ran = true;        // false: the collective has no such mode (alltoall in place)
};

struct Row {
  size_t bytes = 0;       // nccl-tests' size column
  size_t count = 0;       // the call's count argument
  weftDataType_t type = weftFloat32;
  weftRedOp_t op = weftSum;
  Measurement out_of_place;
  Measurement in_place;
  bool has_baseline = false;
  Measurement baseline;   // raw MPI, out of place, not checked
};

// This rank's place: weft's communicator, (for -y 0) its host stream, and
// the harness the ranks meet and combine results over (not owned).
struct World {
  weftComm_t comm = nullptr;
  weftStream_t stream = nullptr;
  Harness* harness = nullptr;
  int rank = 0;
  int nranks = 1;
};

class Runner {
 public:
  static absl::StatusOr<std::unique_ptr<Runner>> Create(const Options& options, const World& world);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // nccl-tests' warm-up: -w calls at the largest, then the smallest size.
  absl::Status Warmup(weftDataType_t t, weftRedOp_t op);
  absl::StatusOr<Row> Run(size_t size, weftDataType_t t, weftRedOp_t op);

 private:
  enum class Mode { kOutOfPlace, kInPlace, kMpi };
  Runner(const Options& options, const World& world) : o_(options), w_(world) {}

  absl::Status Launch(Mode m, const Layout& l, weftDataType_t t, weftRedOp_t op, int iter);
  absl::Status Complete();
  absl::StatusOr<double> Time(Mode m, const Layout& l, weftDataType_t t, weftRedOp_t op);
  absl::StatusOr<long long> Check(Mode m, const Layout& l, weftDataType_t t, weftRedOp_t op);
  absl::StatusOr<double> Combine(double seconds);

  const Options o_;
  const World w_;
  size_t capacity_ = 0;
  unsigned char* send_ = nullptr;
  unsigned char* recv_ = nullptr;
  unsigned char* expected_ = nullptr;
  uint64_t checks_ = 0;  // seeds: every checked call gets fresh values, the same on every rank
};

}  // namespace weft_bench

#endif  // WEFT_BENCH_RUNNER_H_
