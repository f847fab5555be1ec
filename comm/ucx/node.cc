#include "comm/ucx/node.h"

#include <cstring>

#include "comm/ucx/pipeline.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace ucx {
absl::Status CheckUcs(ucs_status_t s, const char* call) {
  if (s == UCS_OK) return absl::OkStatus();
  return SystemError("%s failed: %s", call, ucs_status_string(s));
}

absl::StatusOr<Node*> Node::Get() {
  static std::mutex mu;
  // Never destroyed: the worker lives as long as the process, since closing
  // its endpoints would need every peer to help (see node.h).
  static Node* node = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (node != nullptr) return node;
  auto* n = new Node();
  absl::Status s = n->Init();
  if (!s.ok()) {
    // A half-made node is not reused; its UCP objects are released.
    if (n->worker_ != nullptr) ucp_worker_destroy(n->worker_);
    if (n->context_ != nullptr) ucp_cleanup(n->context_);
    delete n;
    return s;
  }
  node = n;
  return node;
}

absl::Status Node::Init() {
  ucp_config_t* config = nullptr;
  RETURN_IF_ERROR(CheckUcs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read"));
  ucp_params_t params;
  std::memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  const ucs_status_t init = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  RETURN_IF_ERROR(CheckUcs(init, "ucp_init"));

  ucp_worker_params_t wp;
  std::memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  RETURN_IF_ERROR(CheckUcs(ucp_worker_create(context_, &wp, &worker_), "ucp_worker_create"));

  ucp_address_t* address = nullptr;
  size_t length = 0;
  RETURN_IF_ERROR(CheckUcs(ucp_worker_get_address(worker_, &address, &length), "ucp_worker_get_address"));
  address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);
  Log(LogLevel::kInfo, "ucx: worker ready, address %d bytes", length);
  return absl::OkStatus();
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
  RETURN_IF_ERROR(CheckUcs(ucp_ep_create(worker_, &p, &ep), "ucp_ep_create"));
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
