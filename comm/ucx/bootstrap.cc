#include "comm/ucx/bootstrap.h"

#include <mpi.h>

#include <cstring>

#include "comm/mpi/bootstrap.h"
#include "comm/mpi/pipeline.h"
#include "comm/ucx/pipeline.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace ucx {
namespace {

// Runs a nonblocking MPI collective on MPI_COMM_WORLD to completion, with
// the communicator's timeout (a process that never arrives is a Timeout).
template <typename Start>
absl::Status OverWorld(int rank, int timeout_ms, const char* what, Start start) {
  MPI_Request req = MPI_REQUEST_NULL;
  {
    mpi::CallLock lock;
    RETURN_IF_ERROR(mpi::CheckMpi(start(&req), what));
  }
  return mpi::WaitAll(1, &req, {MPI_COMM_WORLD, rank, timeout_ms, nullptr}, what);
}

}  // namespace

absl::Status CheckUcs(ucs_status_t s, const char* call) {
  if (s == UCS_OK) return absl::OkStatus();
  return SystemError("%s failed: %s", call, ucs_status_string(s));
}

absl::StatusOr<Node*> Node::Get(int timeout_ms) {
  static std::mutex mu;
  // Never destroyed: the worker lives as long as the process, since closing
  // its endpoints would need every peer to help (see bootstrap.h).
  static Node* node = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (node != nullptr) return node;
  auto* n = new Node();
  absl::Status s = n->Init(timeout_ms);
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

absl::Status Node::Init(int timeout_ms) {
  RETURN_IF_ERROR(mpi::EnsureInitialized());
  int size = 0;
  {
    mpi::CallLock lock;
    RETURN_IF_ERROR(mpi::CheckMpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank"));
    RETURN_IF_ERROR(mpi::CheckMpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size"));
  }

  ucp_config_t* config = nullptr;
  RETURN_IF_ERROR(CheckUcs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read"));
  ucp_params_t params;
  std::memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG;
  params.estimated_num_eps = static_cast<size_t>(size);
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
  const std::string mine(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);

  // Every process's address length, then the addresses, padded to the longest.
  const auto ulen = static_cast<unsigned long long>(length);
  std::vector<unsigned long long> lengths(static_cast<size_t>(size));
  RETURN_IF_ERROR(OverWorld(world_rank_, timeout_ms, "MPI_Iallgather (UCX address lengths)", [&](MPI_Request* r) {
    return MPI_Iallgather(&ulen, 1, MPI_UNSIGNED_LONG_LONG, lengths.data(), 1, MPI_UNSIGNED_LONG_LONG,
                          MPI_COMM_WORLD, r);
  }));
  size_t longest = 0;
  for (unsigned long long l : lengths) longest = std::max<size_t>(longest, l);
  if (longest > (size_t{1} << 20)) return SystemError("a UCX worker address of %d bytes is implausible", longest);
  std::string padded = mine;
  padded.resize(longest);
  std::string all(longest * static_cast<size_t>(size), '\0');
  RETURN_IF_ERROR(OverWorld(world_rank_, timeout_ms, "MPI_Iallgather (UCX addresses)", [&](MPI_Request* r) {
    return MPI_Iallgather(padded.data(), static_cast<int>(longest), MPI_BYTE, all.data(), static_cast<int>(longest),
                          MPI_BYTE, MPI_COMM_WORLD, r);
  }));
  addresses_.resize(static_cast<size_t>(size));
  for (size_t q = 0; q < addresses_.size(); ++q) addresses_[q] = all.substr(q * longest, lengths[q]);
  eps_.assign(addresses_.size(), nullptr);
  Log(LogLevel::kInfo, "ucx: rank %d of %d, worker address %d bytes", world_rank_, size, length);
  return absl::OkStatus();
}

absl::StatusOr<ucp_ep_h> Node::Endpoint(int world_rank) {
  if (world_rank < 0 || world_rank >= world_size()) {
    return InternalError("no process %d in a world of %d", world_rank, world_size());
  }
  ucp_ep_h& ep = eps_[static_cast<size_t>(world_rank)];
  if (ep != nullptr) return ep;
  ucp_ep_params_t p;
  std::memset(&p, 0, sizeof(p));
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  p.address = reinterpret_cast<const ucp_address_t*>(addresses_[static_cast<size_t>(world_rank)].data());
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

absl::StatusOr<uint32_t> Node::AgreeWorldId(int timeout_ms) {
  const unsigned mine = NextId();
  unsigned id = 0;
  RETURN_IF_ERROR(OverWorld(world_rank_, timeout_ms, "MPI_Iallreduce (UCX communicator id)", [&](MPI_Request* r) {
    return MPI_Iallreduce(&mine, &id, 1, MPI_UNSIGNED, MPI_MAX, MPI_COMM_WORLD, r);
  }));
  RETURN_IF_ERROR(Claim(id));
  return id;
}

}  // namespace ucx
}  // namespace weft
