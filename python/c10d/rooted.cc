// WeftBackend's rooted collectives (reduce, gather, scatter), all-to-all and
// point-to-point, as Ops (op.h).
#include <c10/util/Exception.h>

#include "op.h"

namespace weft_c10d {

namespace {

int Root(const char* op, int64_t root, int size) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "weft: ", op, ": root ", root, " is outside the group of ", size);
  return static_cast<int>(root);
}

// Counts and displacements (elements of weft's type, `per` to each of the
// tensor's) of one side of an uneven all-to-all: torch's split sizes count
// rows of dimension 0; empty splits mean equal ones.
void Splits(const char* op, const at::Tensor& t, const std::vector<int64_t>& splits, int size, size_t per,
            std::vector<size_t>& counts, std::vector<size_t>& displs) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t row = rows == 0 ? 0 : t.numel() / rows;
  counts.assign(size, 0);
  displs.assign(size, 0);
  if (splits.empty()) {
    TORCH_CHECK_VALUE(rows % size == 0, "weft: ", op, ": ", rows, " rows do not split evenly over ", size, " ranks");
  } else {
    TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size, "weft: ", op, ": ", splits.size(),
                      " split sizes for a group of ", size);
  }
  size_t at = 0;
  for (int q = 0; q < size; ++q) {
    const int64_t n = splits.empty() ? rows / size : splits[q];
    TORCH_CHECK_VALUE(n >= 0, "weft: ", op, ": split size ", n);
    counts[q] = static_cast<size_t>(n * row) * per;
    displs[q] = at;
    at += counts[q];
  }
  TORCH_CHECK_VALUE(at == static_cast<size_t>(t.numel()) * per, "weft: ", op, ": the split sizes cover ", at / per,
                    " elements of a tensor of ", t.numel());
}

}  // namespace

c10::intrusive_ptr<c10d::Work> WeftBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor& t = One("reduce", tensors);
  const int root = Root("reduce", opts.rootRank, getSize());
  Op op(*this, "reduce", c10d::OpType::REDUCE, t);
  const Typed ty = ReducedAs(op.name(), t);
  const weftRedOp_t wop = WeftOp(op.name(), opts.reduceOp, t);
  at::Tensor buf = op.Out(t, /*read=*/true);
  at::Tensor in = buf;
  if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM) {
    in = op.Premul(buf, opts.reduceOp);
    op.Keep(in);
  }
  op.Call([in, buf, ty, wop, root](weftComm_t c, void* s) {
    return weftReduce(in.data_ptr(), buf.data_ptr(), Count(buf, ty), ty.dtype, wop, root, c, s);
  });
  return op.Issue(tensors, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const at::Tensor& input = One("gather", inputs);
  const int root = Root("gather", opts.rootRank, getSize());
  Op op(*this, "gather", c10d::OpType::GATHER, input);
  const Typed ty = MovedAs(input);
  at::Tensor in = op.In(input);
  at::Tensor flat;
  std::vector<at::Tensor> list;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(), "weft: gather: "
                      "the root's output list must hold one tensor per rank (", getSize(), ")");
    for (const auto& o : outputs[0]) {
      TORCH_CHECK_VALUE(o.numel() == input.numel() && o.scalar_type() == input.scalar_type(), "weft: gather: an "
                        "output of ", o.numel(), " ", o.scalar_type(), " for an input of ", input.numel(), " ",
                        input.scalar_type());
      op.Keep(o);
    }
    list = outputs[0];
    flat = at::empty({input.numel() * getSize()}, input.options().memory_format(at::MemoryFormat::Contiguous));
    op.Keep(flat);
    const int64_t n = input.numel();
    op.Post([list, flat, n]() mutable {
      for (size_t i = 0; i < list.size(); ++i) list[i].copy_(flat.narrow(0, static_cast<int64_t>(i) * n, n).view(list[i].sizes()));
    });
  }
  op.Call([in, flat, ty, root](weftComm_t c, void* s) {
    return weftGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, Count(in, ty), ty.dtype, root, c, s);
  });
  return op.Issue(list, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  const at::Tensor& output = One("scatter", outputs);
  const int root = Root("scatter", opts.rootRank, getSize());
  Op op(*this, "scatter", c10d::OpType::SCATTER, output);
  const Typed ty = MovedAs(output);
  at::Tensor flat;
  if (getRank() == root) {
    TORCH_CHECK_VALUE(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(), "weft: scatter: "
                      "the root's input list must hold one tensor per rank (", getSize(), ")");
    std::vector<at::Tensor> parts;
    for (const auto& t : inputs[0]) {
      TORCH_CHECK_VALUE(t.numel() == output.numel() && t.scalar_type() == output.scalar_type() &&
                        t.device() == output.device(), "weft: scatter: an input of ", t.numel(), " ", t.scalar_type(),
                        " on ", t.device(), " for an output of ", output.numel(), " ", output.scalar_type(), " on ",
                        output.device());
      parts.push_back(t.reshape({-1}));
    }
    flat = op.In(at::cat(parts));
  }
  at::Tensor out = op.Out(output, /*read=*/false);
  op.Call([flat, out, ty, root](weftComm_t c, void* s) {
    return weftScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), Count(out, ty), ty.dtype, root, c,
                       s);
  });
  return op.Issue(outputs, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& output_splits,
                                                          std::vector<int64_t>& input_splits,
                                                          const c10d::AllToAllOptions& opts) {
  Op op(*this, "all_to_all_single", c10d::OpType::ALLTOALL_BASE, input);
  TORCH_CHECK_VALUE(output.scalar_type() == input.scalar_type(), "weft: all_to_all_single: output ",
                    output.scalar_type(), ", input ", input.scalar_type());
  const Typed ty = MovedAs(input);
  at::Tensor in = op.In(input);
  at::Tensor out = op.Out(output, /*read=*/false);
  if (output_splits.empty() && input_splits.empty()) {
    TORCH_CHECK_VALUE(input.numel() == output.numel() && input.numel() % getSize() == 0, "weft: all_to_all_single: "
                      "input of ", input.numel(), " and output of ", output.numel(), " elements do not split evenly "
                      "over ", getSize(), " ranks");
    const size_t count = Count(input, ty) / static_cast<size_t>(getSize());
    op.Call([in, out, count, ty](weftComm_t c, void* s) {
      return weftAllToAll(in.data_ptr(), out.data_ptr(), count, ty.dtype, c, s);
    });
    return op.Issue({output}, opts.asyncOp);
  }
  auto counts = std::make_shared<std::vector<size_t>[]>(4);
  Splits(op.name(), input, input_splits, getSize(), ty.per, counts[0], counts[1]);
  Splits(op.name(), output, output_splits, getSize(), ty.per, counts[2], counts[3]);
  op.Call([in, out, counts, ty](weftComm_t c, void* s) {  // weft reads the counts before it returns
    return weftAllToAllv(in.data_ptr(), counts[0].data(), counts[1].data(), out.data_ptr(), counts[2].data(),
                         counts[3].data(), ty.dtype, c, s);
  });
  return op.Issue({output}, opts.asyncOp);
}

c10::intrusive_ptr<c10d::Work> WeftBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions& opts) {
  TORCH_CHECK_VALUE(static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
                    "weft: all_to_all: ", inputs.size(), " inputs and ", outputs.size(), " outputs for a group of ",
                    getSize());
  Op op(*this, "all_to_all", c10d::OpType::ALLTOALL, inputs[0]);
  const Typed ty = MovedAs(inputs[0]);
  auto counts = std::make_shared<std::vector<size_t>[]>(4);
  std::vector<at::Tensor> in_parts;
  size_t in_at = 0, out_at = 0;
  for (int q = 0; q < getSize(); ++q) {
    TORCH_CHECK_VALUE(inputs[q].scalar_type() == inputs[0].scalar_type() &&
                      outputs[q].scalar_type() == inputs[0].scalar_type(), "weft: all_to_all: tensors of different "
                      "dtypes (", inputs[q].scalar_type(), ", ", outputs[q].scalar_type(), ")");
    TORCH_CHECK_VALUE(inputs[q].device() == inputs[0].device() && outputs[q].device() == inputs[0].device(),
                      "weft: all_to_all: a tensor on ", inputs[q].device(), " or ", outputs[q].device(), " beside one on ",
                      inputs[0].device(), "; every tensor of a collective must be on one device");
    in_parts.push_back(inputs[q].reshape({-1}));
    counts[0].push_back(Count(inputs[q], ty));
    counts[1].push_back(in_at);
    in_at += Count(inputs[q], ty);
    counts[2].push_back(Count(outputs[q], ty));
    counts[3].push_back(out_at);
    out_at += Count(outputs[q], ty);
    op.Keep(outputs[q]);
  }
  // weft moves one buffer each way; the lists are packed into and out of them.
  at::Tensor in = op.In(at::cat(in_parts));
  at::Tensor out = op.Out(at::empty({static_cast<int64_t>(out_at / ty.per)}, inputs[0].options()), /*read=*/false);
  std::vector<at::Tensor> list = outputs;
  op.Post([list, out, counts, ty]() mutable {
    for (size_t q = 0; q < list.size(); ++q) {
      const auto at = static_cast<int64_t>(counts[3][q] / ty.per), n = static_cast<int64_t>(counts[2][q] / ty.per);
      list[q].copy_(out.narrow(0, at, n).view(list[q].sizes()));
    }
  });
  op.Call([in, out, counts, ty](weftComm_t c, void* s) {
    return weftAllToAllv(in.data_ptr(), counts[0].data(), counts[1].data(), out.data_ptr(), counts[2].data(),
                         counts[3].data(), ty.dtype, c, s);
  });
  return op.Issue(outputs, opts.asyncOp);
}

namespace {

// Point-to-point: torch's tag is weft's. On CUDA tensors NCCL has no tags:
// torch's own NCCL backend ignores one, weft refuses it rather than match
// by order, before the group's CUDA communicator would be made for it.
// Inside a coalesced group (batch_isend_irecv) they join its weft group.
void CheckTag(const char* op, const at::Tensor& t, int tag) {
  TORCH_CHECK_VALUE(tag >= 0 && tag <= WEFT_TAG_MAX, "weft: ", op, ": tag ", tag, " is outside [0, ", WEFT_TAG_MAX,
                    "] (WEFT_TAG_MAX)");
  TORCH_CHECK_VALUE(tag == 0 || !t.device().is_cuda(), "weft: ", op, ": tag ", tag, " on a CUDA tensor: NCCL has no "
                    "tags, so CUDA tensors take tag 0 (or use CPU tensors)");
}

}  // namespace

void WeftBackend::CheckP2p(const char* op, const at::Tensor& t, int peer, int tag) {
  CheckTag(op, t, tag);
  TORCH_CHECK_VALUE(peer >= 0 && peer < getSize(), "weft: ", op, ": peer ", peer, " is outside the group of ", getSize());
}

// batch_isend_irecv leaves its coalesced group open when a call in it
// raises (torch does not call endCoalescing then), so a refused send or
// receive ends the group itself.
c10::intrusive_ptr<c10d::Work> WeftBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  try {
    const at::Tensor& t = One("send", tensors);
    CheckP2p("send", t, dst, tag);
    Op op(*this, "send", c10d::OpType::SEND, t);
    const Typed ty = MovedAs(t);
    at::Tensor in = op.In(t);
    op.Call([in, ty, dst, tag](weftComm_t c, void* s) {
      return weftSendTagged(in.data_ptr(), Count(in, ty), ty.dtype, dst, tag, c, s);
    });
    return op.Issue(tensors);
  } catch (...) {
    if (coalescing_) AbandonGroup();
    throw;
  }
}

c10::intrusive_ptr<c10d::Work> WeftBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  try {
    const at::Tensor& t = One("recv", tensors);
    CheckP2p("recv", t, src, tag);
    Op op(*this, "recv", c10d::OpType::RECV, t);
    const Typed ty = MovedAs(t);
    at::Tensor out = op.Out(t, /*read=*/false);
    op.Call([out, ty, src, tag](weftComm_t c, void* s) {
      return weftRecvTagged(out.data_ptr(), Count(out, ty), ty.dtype, src, tag, c, s);
    });
    return op.Issue(tensors);
  } catch (...) {
    if (coalescing_) AbandonGroup();
    throw;
  }
}

// torch's recv without a src: weft writes the sender into the Work, whose
// sourceRank() torch reads once it has waited for it.
c10::intrusive_ptr<c10d::Work> WeftBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  try {
    const at::Tensor& t = One("recv", tensors);
    TORCH_CHECK_NOT_IMPLEMENTED(!t.device().is_cuda(), "weft: recv from any source of a CUDA tensor: NCCL's "
                                "receives name their peer; give recv a src, or use CPU tensors");
    CheckTag("recv", t, tag);
    Op op(*this, "recv", c10d::OpType::RECVANYSOURCE, t);
    const Typed ty = MovedAs(t);
    at::Tensor out = op.Out(t, /*read=*/false);
    auto source = std::make_shared<int>(-1);
    op.Call([out, ty, tag, source](weftComm_t c, void* s) {
      return weftRecvAnySource(out.data_ptr(), Count(out, ty), ty.dtype, tag, source.get(), c, s);
    });
    c10::intrusive_ptr<c10d::Work> work = op.Issue(tensors);
    // In a coalesced group the Work is the group's, of several calls: no one source.
    if (!coalescing_) static_cast<WeftWork*>(work.get())->source_ = std::move(source);
    return work;
  } catch (...) {
    if (coalescing_) AbandonGroup();
    throw;
  }
}


}  // namespace weft_c10d
