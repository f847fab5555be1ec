#include "comm/bootstrap/bootstrap.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "core/status.h"

namespace weft {
namespace bootstrap {
namespace {

// Bootstrap messages are small; a block this large is a caller's bug.
constexpr size_t kMaxVarBytes = size_t{1} << 24;

class SelfBootstrap final : public Bootstrap {
 public:
  SelfBootstrap() : Bootstrap(0, 1) {}
  absl::Status AllGather(const void* mine, void* all, size_t bytes) override {
    if (bytes > 0) std::memmove(all, mine, bytes);
    return absl::OkStatus();
  }
  std::string Describe() const override { return "a one-rank world"; }
};

}  // namespace

absl::Status Bootstrap::Broadcast(void* bytes, size_t n) {
  std::vector<unsigned char> all(n * static_cast<size_t>(size()));
  RETURN_IF_ERROR(AllGather(bytes, all.data(), n));
  if (n > 0) std::memcpy(bytes, all.data(), n);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Bootstrap::AllGatherVar(const std::string& mine) {
  if (mine.size() > kMaxVarBytes) {
    return InternalError("bootstrap all-gather of %d bytes from rank %d: more than %d", mine.size(), rank(),
                         kMaxVarBytes);
  }
  const uint64_t len = mine.size();
  std::vector<uint64_t> lens(static_cast<size_t>(size()));
  RETURN_IF_ERROR(AllGather(&len, lens.data(), sizeof(len)));
  uint64_t longest = 0;
  for (int q = 0; q < size(); ++q) {
    if (lens[static_cast<size_t>(q)] > kMaxVarBytes) {
      return SystemError("bootstrap: rank %d announced a block of %d bytes (at most %d)", q,
                         lens[static_cast<size_t>(q)], kMaxVarBytes);
    }
    longest = std::max(longest, lens[static_cast<size_t>(q)]);
  }
  std::string padded = mine;
  padded.resize(longest);
  std::string all(longest * static_cast<size_t>(size()), '\0');
  RETURN_IF_ERROR(AllGather(padded.data(), all.data(), longest));
  std::vector<std::string> out(static_cast<size_t>(size()));
  for (size_t q = 0; q < out.size(); ++q) out[q] = all.substr(q * longest, lens[q]);
  return out;
}

absl::StatusOr<bool> Bootstrap::AllOk(bool ok) {
  const unsigned char mine = ok ? 1 : 0;
  std::vector<unsigned char> all(static_cast<size_t>(size()));
  RETURN_IF_ERROR(AllGather(&mine, all.data(), 1));
  return std::all_of(all.begin(), all.end(), [](unsigned char v) { return v == 1; });
}

std::unique_ptr<Bootstrap> Self() { return std::make_unique<SelfBootstrap>(); }

std::string NodeKey() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(host) + "/" + boot;
}

absl::StatusOr<Locality> FindLocality(Bootstrap& b) {
  ASSIGN_OR_RETURN(const std::vector<std::string> keys, b.AllGatherVar(NodeKey()));
  Locality l;
  l.node_of.resize(keys.size());
  std::map<std::string, int> nodes;
  for (size_t q = 0; q < keys.size(); ++q) {
    auto it = nodes.emplace(keys[q], static_cast<int>(nodes.size())).first;
    l.node_of[q] = it->second;
  }
  l.num_nodes = static_cast<int>(nodes.size());
  const int mine = l.node_of[static_cast<size_t>(b.rank())];
  l.local_rank = static_cast<int>(std::count(l.node_of.begin(), l.node_of.begin() + b.rank(), mine));
  l.local_size = static_cast<int>(std::count(l.node_of.begin(), l.node_of.end(), mine));
  return l;
}

bool Oversubscribed(const Locality& where) {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 || static_cast<unsigned>(where.local_size) > cores;
}

}  // namespace bootstrap
}  // namespace weft
