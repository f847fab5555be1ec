#include "bench/kernels/tensor_list.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace weft {
namespace bench {

absl::StatusOr<std::vector<TensorSpec>> ReadTensorList(const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("cannot open tensor list %s", path);
  std::vector<TensorSpec> out;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    TensorSpec t;
    std::string dims;
    if (!(fields >> t.name)) continue;  // blank or comment
    if (!(fields >> dims)) return InvalidArgument("%s:%d: '%s' has no shape", path, lineno, t.name);
    t.count = 1;
    for (absl::string_view d : absl::StrSplit(dims, 'x')) {
      size_t v = 0;
      if (!absl::SimpleAtoi(d, &v) || v == 0) {
        return InvalidArgument("%s:%d: bad dimension '%s' in %s", path, lineno, std::string(d), dims);
      }
      t.shape.push_back(v);
      t.count *= v;
    }
    out.push_back(std::move(t));
  }
  return out;
}

size_t TotalCount(const std::vector<TensorSpec>& list) {
  size_t n = 0;
  for (const TensorSpec& t : list) n += t.count;
  return n;
}

}  // namespace bench
}  // namespace weft
