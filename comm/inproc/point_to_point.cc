// In-process sends and receives: a send copies its bytes into a message for
// the receiver's mailbox of its tag and returns (it never waits, so ranks
// that all send before they receive do not deadlock); a receive takes the
// oldest message from that sender on its tag (from any rank: the one posted
// first of each rank's oldest), checks that it carries the count and type
// the receiver expects, and copies it out.
#include <chrono>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "comm/inproc/comm.h"
#include "core/status.h"

namespace weft {
namespace inproc {

void World::Post(int from, int to, int tag, Message m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    m.from = from;
    m.posted = posted_++;
    mail_[{to, tag, from}].push_back(std::move(m));
  }
  cv_.notify_all();
}

std::deque<World::Message>* World::Oldest(int from, int to, int tag) {
  if (from != kAnySource) {
    auto it = mail_.find({to, tag, from});
    return it == mail_.end() || it->second.empty() ? nullptr : &it->second;
  }
  std::deque<Message>* oldest = nullptr;
  for (auto it = mail_.lower_bound({to, tag, std::numeric_limits<int>::min()});
       it != mail_.end() && std::get<0>(it->first) == to && std::get<1>(it->first) == tag; ++it) {
    if (!it->second.empty() && (oldest == nullptr || it->second.front().posted < oldest->front().posted)) {
      oldest = &it->second;
    }
  }
  return oldest;
}

absl::StatusOr<World::Message> World::Take(int from, int to, int tag, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  std::deque<Message>* box = nullptr;
  const bool got = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    box = Oldest(from, to, tag);
    return box != nullptr || aborted_;
  });
  if (aborted_) return Aborted("in-process world was aborted");
  if (!got) {
    const std::string who = from == kAnySource ? "any rank" : absl::StrFormat("rank %d", from);
    return Timeout("rank %d waited %d ms for a message from %s on tag %d", to, timeout_ms, who, tag);
  }
  Message m = std::move(box->front());
  box->pop_front();
  return m;
}

absl::Status InProcComm::DoSend(const void* send, size_t count, DataType t, int peer, int tag, void*) {
  if (!broken_.ok()) return broken_.get();
  World::Message m;
  const auto* p = static_cast<const unsigned char*>(send);
  m.bytes.assign(p, p + count * ElementSize(t));
  m.count = count;
  m.t = t;
  world_->Post(rank(), peer, tag, std::move(m));
  return absl::OkStatus();
}

absl::Status InProcComm::DoRecv(void* recv, size_t count, DataType t, int peer, int tag, int* source, void*) {
  if (!broken_.ok()) return broken_.get();
  ASSIGN_OR_RETURN(World::Message m, world_->Take(peer, rank(), tag, options().timeout_ms));
  if (m.count != count || m.t != t) {
    const absl::Status s = InvalidUsage("rank %d sent %zu %s, but rank %d receives %zu %s from it on tag %d", m.from,
                                        m.count, Name(m.t), rank(), count, Name(t), tag);
    broken_.Set(InvalidUsage("rank %d: this communicator is unusable after a receive failed (%s); destroy it", rank(),
                             s.message()));
    return s;
  }
  if (!m.bytes.empty()) std::memcpy(recv, m.bytes.data(), m.bytes.size());
  if (source != nullptr) *source = m.from;
  return absl::OkStatus();
}

}  // namespace inproc
}  // namespace weft
