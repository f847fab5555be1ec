// Reads the tensor lists in bench/data (*.tensors): one tensor per line,
// "name dim0xdim1x...", '#' starting a comment. The kernel benchmarks build
// their inputs from these, and a unit test checks the totals the issue
// states (ResNet-50: 161 tensors, 25,557,032 parameters).
//
//   ASSIGN_OR_RETURN(std::vector<TensorSpec> list, ReadTensorList("bench/data/resnet50.tensors"));
#ifndef WEFT_BENCH_KERNELS_TENSOR_LIST_H_
#define WEFT_BENCH_KERNELS_TENSOR_LIST_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weft {
namespace bench {

struct TensorSpec {
  std::string name;
  std::vector<size_t> shape;
  size_t count = 0;  // product of shape
};

absl::StatusOr<std::vector<TensorSpec>> ReadTensorList(const std::string& path);
size_t TotalCount(const std::vector<TensorSpec>& list);

}  // namespace bench
}  // namespace weft

#endif  // WEFT_BENCH_KERNELS_TENSOR_LIST_H_
