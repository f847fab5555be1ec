#include "comm/ucx/node.h"

#include <poll.h>
#include <time.h>

#include <cstring>

#include "comm/ucx/pipeline.h"
#include "comm/ucx/ucp_api.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace ucx {
absl::Status CheckUcs(ucs_status_t s, const char* call) {
  if (s == UCS_OK) return absl::OkStatus();
  return SystemError("%s failed: %s", call, Ucp().status_string(s));
}

absl::StatusOr<Node*> Node::Get() {
  static std::mutex mu;
  // Never destroyed: the worker lives as long as the process, since closing
  // its endpoints would need every peer to help (see node.h).
  static Node* node = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (node != nullptr) return node;
  RETURN_IF_ERROR(LoadUcp().status());  // libucp is loaded here, not linked (ucp_api.h)
  auto* n = new Node();
  absl::Status s = n->Init();
  if (!s.ok()) {
    // A half-made node is not reused; its UCP objects are released.
    if (n->worker_ != nullptr) Ucp().worker_destroy(n->worker_);
    if (n->context_ != nullptr) Ucp().cleanup(n->context_);
    delete n;
    return s;
  }
  node = n;
  return node;
}

absl::Status Node::Init() {
  // The wakeup feature first: a UCX without it (or whose transports cannot
  // raise events) still runs, with the engine's naps instead of sleeps.
  absl::Status s = InitWorker(/*wakeup=*/true);
  if (!s.ok()) {
    Log(LogLevel::kInfo, "ucx: no worker with the wakeup feature (%s); waits nap instead", s.ToString());
    if (worker_ != nullptr) Ucp().worker_destroy(worker_);
    if (context_ != nullptr) Ucp().cleanup(context_);
    worker_ = nullptr;
    context_ = nullptr;
    efd_.store(-1);
    RETURN_IF_ERROR(InitWorker(/*wakeup=*/false));
  }
  ucp_address_t* address = nullptr;
  size_t length = 0;
  RETURN_IF_ERROR(CheckUcs(Ucp().worker_get_address(worker_, &address, &length), "ucp_worker_get_address"));
  address_.assign(reinterpret_cast<const char*>(address), length);
  Ucp().worker_release_address(worker_, address);
  Log(LogLevel::kInfo, "ucx: worker ready, address %d bytes, %s", length,
      CanSleep() ? "blocking waits sleep on its event fd" : "blocking waits nap");
  return absl::OkStatus();
}

absl::Status Node::InitWorker(bool wakeup) {
  ucp_config_t* config = nullptr;
  RETURN_IF_ERROR(CheckUcs(Ucp().config_read(nullptr, nullptr, &config), "ucp_config_read"));
  ucp_params_t params;
  std::memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | (wakeup ? UCP_FEATURE_WAKEUP : 0);
  const ucs_status_t init = Ucp().init_version(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &context_);
  Ucp().config_release(config);
  RETURN_IF_ERROR(CheckUcs(init, "ucp_init"));

  ucp_worker_params_t wp;
  std::memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  RETURN_IF_ERROR(CheckUcs(Ucp().worker_create(context_, &wp, &worker_), "ucp_worker_create"));
  if (wakeup) {
    int fd = -1;
    RETURN_IF_ERROR(CheckUcs(Ucp().worker_get_efd(worker_, &fd), "ucp_worker_get_efd"));
    efd_.store(fd);
  }
  return absl::OkStatus();
}

unsigned Node::Progress() {
  const unsigned n = Ucp().worker_progress(worker_);
  if (n != 0 && sleepers_ > 0) Ucp().worker_signal(worker_);
  return n;
}

void Node::Sleep(std::chrono::microseconds limit) {
  const int fd = efd_.load(std::memory_order_relaxed);
  if (fd < 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The worker can be armed only once progress finds nothing; what it
    // finds may be the caller's, so the caller polls again instead.
    if (Progress() != 0) {
      ++counts_.busy;
      return;
    }
    const ucs_status_t st = Ucp().worker_arm(worker_);
    if (st == UCS_ERR_BUSY) {  // an event came in between
      ++counts_.busy;
      return;
    }
    if (st != UCS_OK) {
      // Not expected once the event fd exists; the wait goes on polling
      // (bounded, as every wait is, by the caller's timeout).
      Log(LogLevel::kWarn, "ucx: ucp_worker_arm failed: %s; waits poll", Ucp().status_string(st));
      efd_.store(-1);
      return;
    }
    ++sleepers_;
  }
  pollfd p{};
  p.fd = fd;
  p.events = POLLIN;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1000000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1000000) * 1000;
  const int ready = ppoll(&p, 1, &ts, nullptr);
  std::lock_guard<std::mutex> lock(mu_);
  --sleepers_;
  ++counts_.sleeps;
  if (ready > 0) ++counts_.woken;
}

Node::SleepCounts Node::sleep_counts() {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

int Node::AddPeer(const std::string& address) {
  auto [it, added] = peer_of_.emplace(address, static_cast<int>(addresses_.size()));
  if (added) {
    addresses_.push_back(address);
    eps_.push_back(nullptr);
  }
  return it->second;
}

absl::StatusOr<ucp_ep_h> Node::Endpoint(int peer) {
  if (peer < 0 || static_cast<size_t>(peer) >= eps_.size()) {
    return InternalError("no UCX peer %d (of %d known)", peer, eps_.size());
  }
  ucp_ep_h& ep = eps_[static_cast<size_t>(peer)];
  if (ep != nullptr) return ep;
  ucp_ep_params_t p;
  std::memset(&p, 0, sizeof(p));
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  p.address = reinterpret_cast<const ucp_address_t*>(addresses_[static_cast<size_t>(peer)].data());
  RETURN_IF_ERROR(CheckUcs(Ucp().ep_create(worker_, &p, &ep), "ucp_ep_create"));
  return ep;
}

uint32_t Node::NextId() {
  std::lock_guard<std::mutex> lock(id_mu_);
  return next_id_;
}

absl::Status Node::Claim(uint32_t id) {
  if (id >= kMaxIds) {
    return Unsupported("this process has made %d UCX communicators, the most a message tag can tell apart",
                             kMaxIds);
  }
  std::lock_guard<std::mutex> lock(id_mu_);
  if (id >= next_id_) next_id_ = id + 1;
  return absl::OkStatus();
}

}  // namespace ucx
}  // namespace weft
