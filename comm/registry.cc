#include "comm/registry.h"

#include <array>
#include <mutex>
#include <optional>

#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace {

struct Table {
  std::mutex mu;
  std::array<std::optional<BackendFactory>, kNumBackends> entries;
};
Table& GetTable() {
  static auto* t = new Table();
  return *t;
}

}  // namespace

bool RegisterBackend(const BackendFactory& factory) {
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  t.entries[static_cast<int>(factory.id)] = factory;
  return true;
}

const BackendFactory* FindBackend(Backend id) {
  const int i = static_cast<int>(id);
  if (i < 0 || i >= kNumBackends) return nullptr;
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.entries[i] ? &*t.entries[i] : nullptr;
}

absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(Backend backend, const CommOptions& in) {
  const CommOptions options = ResolveOptions(in);
  if (backend == Backend::kAuto) {
    if (options.memory == MemKind::kCuda) {
      backend = Backend::kNccl;
    } else {
      const BackendFactory* mpi = FindBackend(Backend::kMpi);
      backend = (mpi != nullptr && mpi->launched != nullptr && mpi->launched()) ? Backend::kMpi
                                                                                : Backend::kInProcess;
    }
  }
  const BackendFactory* f = FindBackend(backend);
  if (f == nullptr) {
    return Unsupported("backend %s is not built into this libweft (configure with -D%s=enabled and its "
                       "dependencies installed)", Name(backend), Name(backend));
  }
  if (f->memory != options.memory) {
    return InvalidArgument("config.memory = %s does not match backend %s, which works on %s memory",
                           Name(options.memory), Name(backend), Name(f->memory));
  }
  Log(LogLevel::kInfo, "init world: backend %s, memory %s, timeout %d ms", Name(backend), Name(options.memory),
      options.timeout_ms);
  return f->init_world(options);
}

}  // namespace weft
