#include "tests/common/file_store.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/status.h"

namespace weft {
namespace testing {

KeyValueStore FileStore(const std::string& dir) {
  KeyValueStore st;
  auto path = [dir](const std::string& key) {
    std::string p = dir + "/";
    for (char c : key) p += c == '/' ? '_' : c;
    return p;
  };
  st.set = [path](const std::string& key, const std::string& value) -> absl::Status {
    const std::string tmp = path(key) + ".tmp" + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(value.data(), static_cast<std::streamsize>(value.size()));
      if (!f) return SystemError("writing %s", tmp);
    }
    if (std::rename(tmp.c_str(), path(key).c_str()) != 0) return SystemError("renaming %s", tmp);
    return absl::OkStatus();
  };
  st.get = [path](const std::string& key, int timeout_ms) -> absl::StatusOr<std::string> {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      std::ifstream f(path(key), std::ios::binary);
      if (f) {
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
      }
      if (std::chrono::steady_clock::now() > deadline) return Timeout("no key %s", key);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  };
  return st;
}

}  // namespace testing
}  // namespace weft
