// The all-reduce of a sparse (COO) tensor, as gloo offers it: SUM only, on
// CPU. Every rank's coalesced indices and values are gathered and summed
// on every rank (a sparse sum has no fixed size to reduce in place).
//
// Blocking: the second gather's size (the largest nnz) is the first's
// result. The calls are weft's blocking host collectives, which keep the
// communicator's issue order behind any collective still queued on a host
// stream. The Work returned is already complete.
#include <c10/util/Exception.h>

#include <functional>
#include <string>

#include "op.h"

namespace weft_c10d {
namespace {

// What every rank must agree on besides nnz: the dims, the sizes and the dtype.
int64_t ShapeKey(const at::Tensor& t) {
  size_t h = std::hash<std::string>()(std::string(c10::toString(t.scalar_type())));
  for (int64_t s : t.sizes()) h = h * 1000003u ^ std::hash<int64_t>()(s);
  h = h * 1000003u ^ static_cast<size_t>(t.sparse_dim());
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> WeftBackend::SparseAllReduce(at::Tensor& t, const c10d::ReduceOp& rop) {
  TORCH_CHECK_VALUE(rop.op_ == c10d::ReduceOp::SUM, "weft: all_reduce: a sparse tensor is reduced with SUM only "
                    "(as on gloo), not ReduceOp ", static_cast<int>(rop.op_));
  TORCH_CHECK_VALUE(t.device().is_cpu(), "weft: all_reduce: a sparse tensor on ", t.device(), "; weft sums sparse "
                    "tensors on cpu");
  TORCH_CHECK_VALUE(!coalescing_, "weft: all_reduce: a sparse tensor inside a coalescing manager");
  weftComm_t comm = comms_.Host();
  TORCH_CHECK(comm != nullptr, "weft: all_reduce on rank ", getRank(), ": the process group was shut down");
  ++seq_;
  const int size = getSize();
  const auto gather = [&](const at::Tensor& in, at::Tensor& out, const char* what) {
    const Typed ty = MovedAs(in);
    weftResult_t r = weftAllGather(in.data_ptr(), out.data_ptr(), Count(in, ty), ty.dtype, comm, nullptr);
    if (r != weftSuccess) {
      C10_THROW_ERROR(DistBackendError, WeftError(what, getRank(), r));
    }
  };

  at::Tensor in = t.coalesce();
  at::Tensor indices = in.indices().contiguous();  // [sparse dims, nnz]
  at::Tensor values = in.values().contiguous();    // [nnz, dense sizes...]
  const int64_t nnz = in._nnz();
  at::Tensor meta = at::tensor({nnz, ShapeKey(in)}, at::kLong);
  at::Tensor metas = at::empty({size, 2}, at::kLong);
  gather(meta, metas, "all_reduce (sparse: nnz)");
  int64_t most = 0;
  for (int q = 0; q < size; ++q) {
    TORCH_CHECK_VALUE(metas[q][1].item<int64_t>() == meta[1].item<int64_t>(), "weft: all_reduce: rank ", q,
                      "'s sparse tensor differs from rank ", getRank(), "'s (", in.sizes(), ", ", in.scalar_type(),
                      ", ", in.sparse_dim(), " sparse dims) in its sizes, dtype or sparse dims");
    most = std::max(most, metas[q][0].item<int64_t>());
  }
  // Each rank's entries padded to the largest nnz, gathered, then cut back.
  const int64_t sparse_dim = indices.size(0);
  at::Tensor padded_indices = at::zeros({sparse_dim, most}, indices.options());
  padded_indices.narrow(1, 0, nnz).copy_(indices);
  std::vector<int64_t> value_shape = values.sizes().vec();
  value_shape[0] = most;
  at::Tensor padded_values = at::zeros(value_shape, values.options());
  padded_values.narrow(0, 0, nnz).copy_(values);
  at::Tensor all_indices = at::empty({size, sparse_dim, most}, indices.options());
  value_shape.insert(value_shape.begin(), size);
  at::Tensor all_values = at::empty(value_shape, values.options());
  gather(padded_indices, all_indices, "all_reduce (sparse: indices)");
  gather(padded_values, all_values, "all_reduce (sparse: values)");

  std::vector<at::Tensor> idx, val;
  for (int q = 0; q < size; ++q) {
    const int64_t n = metas[q][0].item<int64_t>();
    idx.push_back(all_indices[q].narrow(1, 0, n));
    val.push_back(all_values[q].narrow(0, 0, n));
  }
  at::Tensor sum = at::sparse_coo_tensor(at::cat(idx, 1), at::cat(val, 0), in.sizes(), in.options()).coalesce();
  t.copy_(sum);

  auto work = c10::make_intrusive<WeftWork>(getRank(), c10d::OpType::ALLREDUCE, "all_reduce", false, comm);
  work->outputs_.push_back(t);
  work->Complete(nullptr);
  return work;
}

}  // namespace weft_c10d
