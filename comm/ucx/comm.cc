#include "comm/ucx/comm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <numeric>
#include <utility>
#include <vector>

#include "comm/mpi/bootstrap.h"
#include "comm/registry.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace ucx {
namespace {

// Host name and boot id, padded (p2p::NodeKey).
constexpr size_t kNodeKeyBytes = 320;

// What each rank contributes to a split.
struct SplitEntry {
  int64_t color, key, world_rank, next_id;
};

}  // namespace

UcxComm::UcxComm(Link link, int size, bool oversubscribed, const CommOptions& options)
    : P2pComm(link.rank, size, options, oversubscribed), link_(std::move(link)), oversubscribed_(oversubscribed) {}

absl::Status UcxComm::RunSchedule(p2p::Schedule& s, int window) { return RunPipeline(s, window, link_, Wait()); }

absl::Status UcxComm::AttachSharedMemory() {
  p2p::ShmBootstrap b;
  // Every rank's node key, over UCX; all on one node when all match ours.
  b.all_on_one_node = [this]() -> absl::StatusOr<bool> {
    char mine[kNodeKeyBytes] = {};
    const std::string key = p2p::NodeKey();
    std::memcpy(mine, key.data(), std::min(key.size(), sizeof(mine) - 1));
    std::vector<char> all(sizeof(mine) * static_cast<size_t>(size()));
    RETURN_IF_ERROR(p2p::AllGather(MakeEngine(), mine, all.data(), sizeof(mine), DataType::kUint8));
    for (int q = 0; q < size(); ++q) {
      if (std::memcmp(all.data() + sizeof(mine) * static_cast<size_t>(q), mine, sizeof(mine)) != 0) return false;
    }
    return true;
  };
  b.broadcast = [this](void* bytes, size_t n) { return p2p::Broadcast(MakeEngine(), bytes, bytes, n, 0); };
  b.all_min = [this](int* v) { return p2p::AllReduce(MakeEngine(), v, v, 1, DataType::kInt32, RedOp::kMin); };
  return P2pComm::AttachSharedMemory(b);
}

absl::StatusOr<std::unique_ptr<Communicator>> UcxComm::DoSplit(int color, int key) {
  RETURN_IF_ERROR(Usable());
  // Every rank's (color, key, process, next free id), over this communicator.
  const SplitEntry mine{color, key, link_.world_ranks[static_cast<size_t>(rank())], link_.node->NextId()};
  std::vector<SplitEntry> all(static_cast<size_t>(size()));
  RETURN_IF_ERROR(p2p::AllGather(MakeEngine(), &mine, all.data(), sizeof(SplitEntry) / sizeof(int64_t),
                                 DataType::kInt64));
  if (color < 0) return std::unique_ptr<Communicator>();
  std::vector<int> members;  // old ranks of this color, ordered by (key, old rank)
  for (int q = 0; q < size(); ++q) {
    if (all[static_cast<size_t>(q)].color == color) members.push_back(q);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[static_cast<size_t>(a)].key < all[static_cast<size_t>(b)].key;
  });
  Link link;
  link.node = link_.node;
  link.id = 0;
  for (int q : members) {
    const SplitEntry& e = all[static_cast<size_t>(q)];
    link.id = std::max(link.id, static_cast<uint32_t>(e.next_id));
    if (q == rank()) link.rank = static_cast<int>(link.world_ranks.size());
    link.world_ranks.push_back(static_cast<int>(e.world_rank));
  }
  RETURN_IF_ERROR(link_.node->Claim(link.id));
  const int n = static_cast<int>(members.size());
  auto c = std::make_unique<UcxComm>(std::move(link), n, oversubscribed_, options());
  RETURN_IF_ERROR(c->AttachSharedMemory());
  return std::unique_ptr<Communicator>(std::move(c));
}

absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(const CommOptions& in) {
  const CommOptions options = ResolveOptions(in);
  ASSIGN_OR_RETURN(Node * node, Node::Get(options.timeout_ms));
  if (node->world_size() > kMaxRanks) {
    return Unsupported("a UCX world of %d processes is more than the %d a message tag can tell apart",
                       node->world_size(), kMaxRanks);
  }
  Link link;
  link.node = node;
  ASSIGN_OR_RETURN(link.id, node->AgreeWorldId(options.timeout_ms));
  link.rank = node->world_rank();
  link.world_ranks.resize(static_cast<size_t>(node->world_size()));
  std::iota(link.world_ranks.begin(), link.world_ranks.end(), 0);
  const int size = node->world_size();
  auto c = std::make_unique<UcxComm>(std::move(link), size, mpi::Oversubscribed(), options);
  RETURN_IF_ERROR(c->AttachSharedMemory());
  return std::unique_ptr<Communicator>(std::move(c));
}

namespace {

[[maybe_unused]] const bool kRegistered =
    RegisterBackend({Backend::kUcx, MemKind::kHost, &mpi::Launched, &InitWorld});

}  // namespace
}  // namespace ucx
}  // namespace weft
