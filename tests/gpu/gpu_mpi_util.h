// For GPU tests launched by mpiexec: whether NCCL can run here, one GPU per
// rank of this node.
#ifndef WEFT_TESTS_GPU_GPU_MPI_UTIL_H_
#define WEFT_TESTS_GPU_GPU_MPI_UTIL_H_

#include <mpi.h>

#include <cuda_runtime.h>

#include <string>

#include "tests/gpu/gpu_test_util.h"

namespace weft {
namespace gputest {

// "" when each local rank can have a GPU of its own, else why not.
inline std::string NoGpuPerRankReason() {
  const std::string reason = NoDeviceReason();
  if (!reason.empty()) return reason;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, devices = 0;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  (void)cudaGetDeviceCount(&devices);
  if (devices < local) {
    return std::to_string(local) + " ranks on this node but " + std::to_string(devices) +
           " GPU(s): NCCL needs one GPU per rank";
  }
  return "";
}

}  // namespace gputest
}  // namespace weft

#endif  // WEFT_TESTS_GPU_GPU_MPI_UTIL_H_
