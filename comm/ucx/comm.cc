#include "comm/ucx/comm.h"

#include <algorithm>
#include <cstdint>
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

// Polling without yielding when each rank on this node has a core.
constexpr std::chrono::microseconds kSpin{200};

// What each rank contributes to a split.
struct SplitEntry {
  int64_t color, key, world_rank, next_id;
};

}  // namespace

UcxComm::UcxComm(Link link, int size, bool oversubscribed, const CommOptions& options)
    : P2pComm(link.rank, size, options, p2p::Tuning{}), link_(std::move(link)),
      spin_(oversubscribed ? std::chrono::microseconds(0) : kSpin) {}

absl::Status UcxComm::RunSchedule(p2p::Schedule& s, int window) {
  return RunPipeline(s, window, link_, {rank(), options().timeout_ms, this, spin_});
}

absl::Status UcxComm::DoBarrier() {
  RETURN_IF_ERROR(Usable());
  return p2p::Barrier(MakeEngine());
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
  return std::unique_ptr<Communicator>(
      std::make_unique<UcxComm>(std::move(link), n, spin_ == std::chrono::microseconds(0), options()));
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
  return std::unique_ptr<Communicator>(std::make_unique<UcxComm>(std::move(link), size, mpi::Oversubscribed(),
                                                                 options));
}

namespace {

[[maybe_unused]] const bool kRegistered =
    RegisterBackend({Backend::kUcx, MemKind::kHost, &mpi::Launched, &InitWorld});

}  // namespace
}  // namespace ucx
}  // namespace weft
