// UCP's functions, resolved from libucp at run time rather than linked.
//
// libweft has no DT_NEEDED on libucp: a libweft built with the UCX backend
// loads and runs where UCX is not installed (a wheel on a bare host, a
// container without it), and only a world that runs on UCX needs it. The
// first Node::Get() loads libucp.so.0 (WEFT_UCX_LIBRARY names another file)
// and looks up every function below; a missing library or function is an
// error that names the backend, the file and the loader's reason, as NCCL
// loads libibverbs. Compiled against the UCX headers found at build time;
// UCP keeps its ABI within a major version, so a newer libucp.so.0 serves.
//
//   ASSIGN_OR_RETURN(const UcpApi* ucp, LoadUcp());
//   ucp->worker_progress(worker);
#ifndef WEFT_COMM_UCX_UCP_API_H_
#define WEFT_COMM_UCX_UCP_API_H_

#include <ucp/api/ucp.h>

#include "absl/status/statusor.h"

namespace weft {
namespace ucx {

struct UcpApi {
  // ucp_init is an inline function of ucp.h over this one.
  decltype(&::ucp_init_version) init_version;
  decltype(&::ucp_cleanup) cleanup;
  decltype(&::ucp_config_read) config_read;
  decltype(&::ucp_config_release) config_release;
  decltype(&::ucp_worker_create) worker_create;
  decltype(&::ucp_worker_destroy) worker_destroy;
  decltype(&::ucp_worker_get_address) worker_get_address;
  decltype(&::ucp_worker_release_address) worker_release_address;
  decltype(&::ucp_worker_get_efd) worker_get_efd;
  decltype(&::ucp_worker_arm) worker_arm;
  decltype(&::ucp_worker_signal) worker_signal;
  decltype(&::ucp_worker_progress) worker_progress;
  decltype(&::ucp_ep_create) ep_create;
  decltype(&::ucp_tag_send_nbx) tag_send_nbx;
  decltype(&::ucp_tag_recv_nbx) tag_recv_nbx;
  decltype(&::ucp_tag_recv_request_test) tag_recv_request_test;
  decltype(&::ucp_request_check_status) request_check_status;
  decltype(&::ucp_request_cancel) request_cancel;
  decltype(&::ucp_request_free) request_free;
  decltype(&::ucs_status_string) status_string;  // libucs, a dependency of libucp
};

// The process's table, loaded on the first call (later calls return the
// same table, or the same error). Thread-safe.
absl::StatusOr<const UcpApi*> LoadUcp();

// The loaded table: only after LoadUcp() succeeded, which Node::Get() does
// before it makes the node every UCP call goes through.
const UcpApi& Ucp();

}  // namespace ucx
}  // namespace weft

#endif  // WEFT_COMM_UCX_UCP_API_H_
