#include "comm/ucx/ucp_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace ucx {
namespace {

UcpApi g_api;
absl::Status g_loaded = absl::UnknownError("not loaded");

// Looks `name` up in `lib` (and the libraries it depends on, libucs among
// them) into `slot`; the error names the function and the file.
template <typename Fn>
absl::Status Resolve(void* lib, const std::string& file, const char* name, Fn& slot) {
  dlerror();
  void* sym = dlsym(lib, name);
  if (sym == nullptr) {
    const char* why = dlerror();
    return SystemError("the UCX backend needs %s from %s, which lacks it (%s): is it UCX 1.10 or newer?", name,
                       file, why != nullptr ? why : "no such symbol");
  }
  slot = reinterpret_cast<Fn>(sym);
  return absl::OkStatus();
}

absl::Status Load() {
  const std::string& file = Env::Get().ucx_library;
  // RTLD_GLOBAL: UCX's transport modules (libuct_*.so, loaded by libucs)
  // resolve UCS and UCT symbols from the already loaded libraries.
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return SystemError("the UCX backend could not load %s (%s): install UCX (Debian: libucx0; pip: libucx-cu13, "
                       "which the weft wheel depends on), set WEFT_UCX_LIBRARY to a libucp.so.0, or launch with "
                       "mpirun to use the MPI backend",
                       file, why != nullptr ? why : "unknown reason");
  }
  // Never dlclose'd: the process's one worker lives until exit (node.h).
  UcpApi a;
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_init_version", a.init_version));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_cleanup", a.cleanup));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_config_read", a.config_read));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_config_release", a.config_release));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_worker_create", a.worker_create));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_worker_destroy", a.worker_destroy));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_worker_get_address", a.worker_get_address));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_worker_release_address", a.worker_release_address));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_worker_get_efd", a.worker_get_efd));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_worker_arm", a.worker_arm));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_worker_signal", a.worker_signal));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_worker_progress", a.worker_progress));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_ep_create", a.ep_create));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_tag_send_nbx", a.tag_send_nbx));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_tag_recv_nbx", a.tag_recv_nbx));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_tag_recv_request_test", a.tag_recv_request_test));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_request_check_status", a.request_check_status));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_request_cancel", a.request_cancel));
  RETURN_IF_ERROR(Resolve(lib, file, "ucp_request_free", a.request_free));
  RETURN_IF_ERROR(Resolve(lib, file, "ucs_status_string", a.status_string));
  unsigned major = 0, minor = 0, release = 0;
  if (auto get_version = reinterpret_cast<void (*)(unsigned*, unsigned*, unsigned*)>(dlsym(lib, "ucp_get_version"))) {
    get_version(&major, &minor, &release);
  }
  Log(LogLevel::kInfo, "ucx: loaded %s (UCX %u.%u.%u)", file, major, minor, release);
  g_api = a;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const UcpApi*> LoadUcp() {
  static std::once_flag once;
  std::call_once(once, [] { g_loaded = Load(); });
  if (!g_loaded.ok()) return g_loaded;
  return &g_api;
}

const UcpApi& Ucp() { return g_api; }

}  // namespace ucx
}  // namespace weft
