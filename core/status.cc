#include "core/status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace weft {

absl::Status Annotate(const absl::Status& s, std::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(std::string(context), ": ", std::string(s.message())));
}

}  // namespace weft
