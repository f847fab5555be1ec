// An Op builds one torch collective out of weft C ABI calls (see backend.cc):
// it routes on the first tensor's device, checks the others against it,
// stages tensors weft cannot take as they are through contiguous temporaries,
// collects the calls and issues them on a host stream or a CUDA stream.
// Internal to weft._c10d; with the small helpers every op file uses.
//
//   Op op(backend, "allreduce", c10d::OpType::ALLREDUCE, t);
//   at::Tensor buf = op.Out(t, /*read=*/true);
//   op.Call([buf](weftComm_t c, void* s) { return weftAllReduce(..., c, s); });
//   return op.Issue({t});
#ifndef WEFT_PYTHON_C10D_OP_H_
#define WEFT_PYTHON_C10D_OP_H_

#include <functional>
#include <vector>

#include "backend.h"

namespace weft_c10d {

// How a tensor goes to weft: as `per` elements of `dtype` for each of its own.
struct Typed {
  weftDataType_t dtype;
  size_t per;
};
// For a reduction: the tensor's weft type, or, for complex, (real,
// imaginary) pairs of its float type (WeftOp allows only the sums on them);
// a TypeError naming `op` and the dtype for any other.
Typed ReducedAs(const char* op, const at::Tensor& t);
// For a collective that only moves data: the tensor's weft type where it has
// one, else its bytes (uint8), so that every dtype moves (uint16..64,
// complex, float8, ...), on CPU and CUDA alike.
Typed MovedAs(const at::Tensor& t);
// The weft reduction for torch's; PREMUL_SUM is SUM after the Op scaled its
// input. On bool (bytes 0 or 1) SUM is logical or, as gloo computes it: MAX.
// A ValueError for an op the dtype has no such reduction for.
weftRedOp_t WeftOp(const char* op, const c10d::ReduceOp& rop, const at::Tensor& t);
// The one tensor of a per-process list (one device per rank).
const at::Tensor& One(const char* op, const std::vector<at::Tensor>& tensors);
// Elements of weft's type in `t`.
inline size_t Count(const at::Tensor& t, const Typed& ty) { return static_cast<size_t>(t.numel()) * ty.per; }

// One collective being built.
class Op {
 public:
  Op(WeftBackend& b, const char* name, c10d::OpType type, const at::Tensor& first) : b_(b), name_(name), type_(type) {
    TORCH_CHECK_VALUE(first.device().is_cpu() || first.device().is_cuda(), "weft: ", name_, ": a tensor on ",
                      first.device(), "; weft's backend takes cpu and cuda tensors");
    device_ = first.device();
    cuda_ = device_.is_cuda();
    comm_ = cuda_ ? b_.comms_.Cuda(device_.index()) : b_.comms_.Host();
    TORCH_CHECK(comm_ != nullptr, "weft: ", name_, " on rank ", b_.getRank(), ": the process group was shut down");
  }

  // A tensor weft reads: itself when its memory holds its values in order,
  // else a contiguous copy. A conjugate or negative view (z.conj(),
  // z.conj().imag) holds other values than it reads as, so it is resolved.
  at::Tensor In(const at::Tensor& t) {
    Check(t);
    at::Tensor c = t.resolve_conj().resolve_neg().contiguous();
    keep_.push_back(c);
    return c;
  }
  // A tensor weft writes: itself when its memory holds its values in order,
  // else a temporary copied back once the data is there (copy_ writes a
  // conjugate or negative view right). `read`: weft also reads it (in place).
  at::Tensor Out(const at::Tensor& t, bool read) {
    Check(t);
    if (t.is_contiguous() && !t.is_conj() && !t.is_neg()) {
      keep_.push_back(t);
      return t;
    }
    at::Tensor c = read ? t.resolve_conj().resolve_neg().contiguous()
                        : at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
    keep_.push_back(t);
    keep_.push_back(c);
    Post([t, c]() mutable { t.copy_(c); });
    return c;
  }
  void Keep(const at::Tensor& t) { keep_.push_back(t); }
  void Post(std::function<void()> f) {
    if (cuda_) {
      cuda_post_.push_back(std::move(f));
    } else {
      post_.push_back(std::move(f));
    }
  }
  void Call(std::function<weftResult_t(weftComm_t, void*)> f) { calls_.push_back(std::move(f)); }

  // PREMUL_SUM's input: the tensor times the op's factor, in its own dtype.
  at::Tensor Premul(const at::Tensor& t, const c10d::ReduceOp& rop) {
    if (rop.op_ != c10d::ReduceOp::PREMUL_SUM) return t;
    TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()), "weft: ", name_,
                      ": PREMUL_SUM of ", t.scalar_type());
    auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
    TORCH_CHECK_VALUE(s != nullptr, "weft: ", name_, ": PREMUL_SUM without its factor");
    if (s->tensor_factor.defined()) return at::mul(t, s->tensor_factor.reshape({}).to(t.device(), t.scalar_type()));
    return at::mul(t, s->double_factor);
  }

  // `async_op`: torch's opts.asyncOp. False (the caller waits for the Work
  // at once) runs host collectives here, on the calling thread (RunHere).
  c10::intrusive_ptr<c10d::Work> Issue(std::vector<at::Tensor> outputs, bool async_op = true);

  const char* name() const { return name_; }
  bool cuda() const { return cuda_; }
  int rank() const { return b_.getRank(); }
  int size() const { return b_.getSize(); }

 private:
  c10::intrusive_ptr<c10d::Work> RunHere(std::vector<at::Tensor> outputs);
  void Check(const at::Tensor& t) {
    TORCH_CHECK_VALUE(t.device() == device_, "weft: ", name_, ": a tensor on ", t.device(), " beside one on ",
                      device_, "; every tensor of a collective must be on one device");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "weft: ", name_, ": a ", t.layout(), " tensor; weft takes "
                      "dense (strided) tensors");
  }

  WeftBackend& b_;
  const char* name_;
  c10d::OpType type_;
  at::Device device_{at::kCPU};
  bool cuda_ = false;
  weftComm_t comm_ = nullptr;
  std::vector<at::Tensor> keep_;
  std::vector<std::function<void()>> post_;
  std::vector<std::function<void()>> cuda_post_;
  std::vector<std::function<weftResult_t(weftComm_t, void*)>> calls_;
};

}  // namespace weft_c10d

#endif  // WEFT_PYTHON_C10D_OP_H_
