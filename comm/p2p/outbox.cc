#include "comm/p2p/outbox.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

using Clock = std::chrono::steady_clock;

// The thread's wait between polls while messages are in flight: it starts
// short (a receiver that is there answers within microseconds) and grows to
// a millisecond, so a message whose receiver is late costs the sender's core
// little.
constexpr auto kFirstWait = std::chrono::microseconds(20);
constexpr auto kLongestWait = std::chrono::milliseconds(1);

}  // namespace

Outbox::Outbox(Wire wire, const Patience& patience, size_t message_bytes,
               std::function<void(const absl::Status&)> on_error)
    : wire_(std::move(wire)), patience_(patience), message_bytes_(std::max<size_t>(message_bytes, 1)),
      on_error_(std::move(on_error)), thread_([this] { Run(); }) {}

Outbox::~Outbox() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0 || !failed_.ok(); });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

absl::Status Outbox::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

absl::Status Outbox::Send(const void* data, size_t bytes, int peer, int tag) {
  auto copy = std::make_shared<std::vector<unsigned char>>(bytes);
  if (bytes > 0) std::memcpy(copy->data(), data, bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) {
      return InvalidUsage("rank %d: sends are refused after an earlier send failed (%s)", patience_.rank,
                          failed_.message());
    }
    for (size_t off = 0; off < bytes; off += message_bytes_) {
      incoming_.push_back({copy, off, std::min(message_bytes_, bytes - off), peer, tag, nullptr});
      ++pending_;
    }
  }
  cv_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<bool> Outbox::Step() {
  bool moved = false;
  for (size_t i = 0; i < flying_.size();) {
    ASSIGN_OR_RETURN(const bool done, wire_.test(flying_[i].handle));
    if (!done) {
      ++i;
      continue;
    }
    --flying_to_[static_cast<size_t>(flying_[i].peer)];
    --queues_[{flying_[i].peer, flying_[i].tag}].flying;
    flying_[i] = std::move(flying_.back());
    flying_.pop_back();
    moved = true;
    std::lock_guard<std::mutex> lock(mu_);
    --pending_;
  }
  for (auto it = queues_.begin(); it != queues_.end();) {
    Queue& q = it->second;
    const auto peer = static_cast<size_t>(it->first.first);
    // A tag with nothing in flight always posts: its receiver may be
    // waiting for it while another tag's messages wait for their receives.
    while (!q.waiting.empty() && (q.flying == 0 || flying_to_[peer] < kInFlight)) {
      Message m = std::move(q.waiting.front());
      q.waiting.pop_front();
      ASSIGN_OR_RETURN(m.handle, wire_.post(m.data->data() + m.offset, m.bytes, m.peer, m.tag));
      moved = true;
      if (m.handle == nullptr) {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_;
        continue;
      }
      ++flying_to_[peer];
      ++q.flying;
      flying_.push_back(std::move(m));
    }
    it = q.waiting.empty() && q.flying == 0 ? queues_.erase(it) : std::next(it);
  }
  return moved;
}

void Outbox::Fail(const absl::Status& s) {
  // A send the wire could not take back may still read its buffer: the
  // buffers of dropped messages are leaked, never freed.
  for (Message& m : flying_) {
    wire_.drop(m.handle);
    static_cast<void>(new std::shared_ptr<std::vector<unsigned char>>(std::move(m.data)));
  }
  flying_.clear();
  queues_.clear();
  std::fill(flying_to_.begin(), flying_to_.end(), 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = s;
    incoming_.clear();
    pending_ = 0;
  }
  cv_.notify_all();
  on_error_(s);
}

void Outbox::Run() {
  auto last_progress = Clock::now();
  auto wait = kFirstWait;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto busy = [&] { return !flying_.empty() || !queues_.empty(); };
      if (!busy()) {
        cv_.notify_all();  // drained: the destructor may be waiting
        cv_.wait(lock, [&] { return stop_ || !incoming_.empty(); });
        last_progress = Clock::now();
        wait = kFirstWait;
      }
      if (stop_ && !busy() && incoming_.empty()) return;
      for (; !incoming_.empty(); incoming_.pop_front()) {
        Message& m = incoming_.front();
        const auto peer = static_cast<size_t>(m.peer);
        if (peer >= flying_to_.size()) flying_to_.resize(peer + 1, 0);
        queues_[{m.peer, m.tag}].waiting.push_back(std::move(m));
      }
    }
    absl::StatusOr<bool> moved = Step();
    if (!moved.ok()) {
      Fail(Annotate(moved.status(), "send"));
      continue;
    }
    if (*moved) {
      last_progress = Clock::now();
      wait = kFirstWait;
      continue;
    }
    if (patience_.owner != nullptr && patience_.owner->aborted()) {
      Fail(Aborted("send: rank %d: the communicator was aborted with sends not yet received", patience_.rank));
      continue;
    }
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_progress);
    if (waited.count() >= patience_.timeout_ms) {
      int to = -1;
      if (!flying_.empty()) to = flying_.front().peer;
      Fail(Timeout("send: rank %d waited %d ms for rank %d to receive a message", patience_.rank, patience_.timeout_ms,
                   to));
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return stop_ || !incoming_.empty(); });
    wait = std::min<std::chrono::microseconds>(wait * 2, kLongestWait);
  }
}

}  // namespace p2p
}  // namespace weft
