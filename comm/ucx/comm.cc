#include "comm/ucx/comm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "comm/bootstrap/bootstrap.h"
#include "comm/registry.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace ucx {
namespace {

// Host name and boot id, padded (bootstrap::NodeKey).
constexpr size_t kNodeKeyBytes = 320;

// What each rank contributes to a split.
struct SplitEntry {
  int64_t color, key, next_id;
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
    const std::string key = bootstrap::NodeKey();
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
  RETURN_IF_ERROR(Check(p2p::MakeCall(p2p::CallKind::kSplit, DataType::kUint8, 0)));
  // Every rank's (color, key, next free id), over this communicator.
  const SplitEntry mine{color, key, link_.node->NextId()};
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
    if (q == rank()) link.rank = static_cast<int>(link.peers.size());
    link.peers.push_back(link_.peers[static_cast<size_t>(q)]);  // peer indices are this process's own
  }
  RETURN_IF_ERROR(link_.node->Claim(link.id));
  const int n = static_cast<int>(members.size());
  auto c = std::make_unique<UcxComm>(std::move(link), n, oversubscribed_, options());
  RETURN_IF_ERROR(c->AttachSharedMemory());
  return std::unique_ptr<Communicator>(std::move(c));
}

absl::StatusOr<std::unique_ptr<Communicator>> InitWorld(bootstrap::Bootstrap& b, const CommOptions& in) {
  const CommOptions options = ResolveOptions(in);
  if (b.size() > kMaxRanks) {
    return Unsupported("a UCX world of %d processes is more than the %d a message tag can tell apart", b.size(),
                       kMaxRanks);
  }
  // Every rank has joined once this first exchange returns: only then is the
  // process's worker (and UCX's own threads) made, so a world that never
  // forms leaves nothing behind.
  ASSIGN_OR_RETURN(const bootstrap::Locality where, bootstrap::FindLocality(b));
  absl::StatusOr<Node*> made = Node::Get();
  // Every rank learns whether every rank has a worker before any waits on one.
  ASSIGN_OR_RETURN(const bool all_ok, b.AllOk(made.ok()));
  if (!made.ok()) return Annotate(made.status(), absl::StrFormat("ucx init on rank %d", b.rank()));
  if (!all_ok) return RemoteError("ucx init: another rank could not set up its UCX worker (see its error)");
  Node* node = *made;
  ASSIGN_OR_RETURN(const std::vector<std::string> addresses, b.AllGatherVar(node->address()));
  // The world's id: the largest next free id of its processes, claimed by all.
  const uint32_t mine = node->NextId();
  std::vector<uint32_t> ids(static_cast<size_t>(b.size()));
  RETURN_IF_ERROR(b.AllGather(&mine, ids.data(), sizeof(mine)));
  Link link;
  link.node = node;
  link.id = *std::max_element(ids.begin(), ids.end());
  RETURN_IF_ERROR(node->Claim(link.id));
  link.rank = b.rank();
  {
    Node::Lock lock(*node);
    for (const std::string& a : addresses) link.peers.push_back(node->AddPeer(a));
  }
  auto c = std::make_unique<UcxComm>(std::move(link), b.size(), bootstrap::Oversubscribed(where), options);
  RETURN_IF_ERROR(c->AttachSharedMemory());
  return std::unique_ptr<Communicator>(std::move(c));
}

namespace {

[[maybe_unused]] const bool kRegistered = RegisterBackend({Backend::kUcx, MemKind::kHost, nullptr, &InitWorld});

}  // namespace
}  // namespace ucx
}  // namespace weft
