// A key-value store of files in one directory, for tests whose processes
// share a file system: weftCommInitStore's store where no framework is.
// set writes atomically (a temporary, then a rename); get polls until the
// file exists or the timeout passes.
//
//   KeyValueStore st = FileStore("/tmp/job");
//   auto comm = InitStore(Backend::kAuto, np, rank, st, "world0", options);
#ifndef WEFT_TESTS_COMMON_FILE_STORE_H_
#define WEFT_TESTS_COMMON_FILE_STORE_H_

#include <string>

#include "comm/registry.h"

namespace weft {
namespace testing {

KeyValueStore FileStore(const std::string& dir);

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_FILE_STORE_H_
