// weft._c10d: the compiled half of weft's torch.distributed backend. The
// Python half (weft/_backend.py) registers "weft" with
// torch.distributed.Backend.register_backend and calls create() for each
// process group torch makes.
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/headeronly/version.h>

#include "backend.h"

namespace {

c10::intrusive_ptr<c10d::Backend> Create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         int64_t timeout_ms) {
  // Making the communicators waits for every rank of the group: let other
  // Python threads run meanwhile.
  pybind11::gil_scoped_release nogil;
  return c10::make_intrusive<weft_c10d::WeftBackend>(store, rank, size, std::chrono::milliseconds(timeout_ms));
}

}  // namespace

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "weft's torch.distributed backend (a c10d::Backend over weft's C ABI)";
  pybind11::module_::import("torch.distributed");  // torch's bindings of Store and Backend
  m.def("create", &Create, pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"),
        pybind11::arg("timeout_ms"),
        "A weft backend for one process group: (store, group rank, group size, timeout in ms).");
  m.def("torch_version", [] { return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR); },
        "The torch minor this module was compiled against (a backend fits one torch minor).");
}
