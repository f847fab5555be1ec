// weft._c10d: the compiled half of weft's torch.distributed backend. The
// Python half (weft/_backend.py) registers "weft" with
// torch.distributed.Backend.register_backend and calls create() for each
// process group torch makes.
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/headeronly/version.h>

#include "backend.h"

namespace {

// The Python handle of a WeftBackend. Dropping the last reference destroys
// the backend, which waits for its issued work; that work's completion may
// run Python callbacks (a future's then()), so the GIL is let go first, as
// torch's own backends' handles do.
template <typename T>
class NoGilHandle {
 public:
  NoGilHandle() = default;
  NoGilHandle(c10::intrusive_ptr<T> impl) : impl_(std::move(impl)) {}  // NOLINT: implicit, as pybind11 needs
  // pybind11 makes a handle from a raw pointer only for an object that a
  // handle or an intrusive_ptr already owns (Python cannot construct one).
  explicit NoGilHandle(T* impl) : impl_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(impl)) {}
  NoGilHandle(const NoGilHandle&) = default;
  NoGilHandle& operator=(const NoGilHandle&) = default;
  ~NoGilHandle() {
    if (impl_ && PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;
      impl_.reset();
    }
  }
  T* get() const noexcept { return impl_.get(); }

 private:
  c10::intrusive_ptr<T> impl_;
};

c10::intrusive_ptr<c10d::Backend> Create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         int64_t timeout_ms) {
  // Making the communicators waits for every rank of the group: let other
  // Python threads run meanwhile.
  pybind11::gil_scoped_release nogil;
  return c10::make_intrusive<weft_c10d::WeftBackend>(store, rank, size, std::chrono::milliseconds(timeout_ms));
}

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, NoGilHandle<T>, true)

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "weft's torch.distributed backend (a c10d::Backend over weft's C ABI)";
  pybind11::module_::import("torch.distributed");  // torch's bindings of Store and Backend
  pybind11::object backend = pybind11::module_::import("torch._C._distributed_c10d").attr("Backend");
  // What torch asks of a backend that splits, beyond c10d::Backend's own
  // bindings: split_group copies the parent's options; new_group, where a
  // device is bound, asks every rank outside the new group to take part.
  pybind11::class_<weft_c10d::WeftBackend, NoGilHandle<weft_c10d::WeftBackend>>(
      m, "WeftBackend", backend, "weft's c10d::Backend: one per process group, for cpu and cuda tensors")
      .def_property_readonly("options", &weft_c10d::WeftBackend::getBackendOptions,
                             "The group's options: the backend's name, its timeout and the group's name.")
      .def(
          "perform_nocolor_split", [](weft_c10d::WeftBackend&, const at::Device&) {}, pybind11::arg("device"),
          "Nothing to do: a weft group is made by its members alone, so a rank outside it takes no part.");
  pybind11::class_<weft_c10d::WeftOptions, c10::intrusive_ptr<weft_c10d::WeftOptions>>(
      m, "Options", backend.attr("Options"), "A weft group's options (torch's Backend.Options, copyable)")
      .def("__copy__", &weft_c10d::WeftOptions::Copy)
      .def("__deepcopy__", [](const weft_c10d::WeftOptions& o, const pybind11::dict&) { return o.Copy(); },
           pybind11::arg("memo"));
  m.def("create", &Create, pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"),
        pybind11::arg("timeout_ms"),
        "A weft backend for one process group: (store, group rank, group size, timeout in ms).");
  m.def("torch_version", [] { return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR); },
        "The torch minor this module was compiled against (a backend fits one torch minor).");
}
