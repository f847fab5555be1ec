// The communicator's part of the timeline (core/trace.h): every call it
// issues becomes a span on the thread that runs it, and a call issued on a
// host stream also gets its wait in the queue, from issue to start (which
// includes waiting for the calls issued before it on this communicator).
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "comm/communicator.h"
#include "core/trace.h"

namespace weft {

trace::Sink* Communicator::trace() {
  if (!trace::On()) return nullptr;
  std::call_once(trace_once_, [this] {
    if (trace_ == nullptr) trace_ = trace::Sink::FromEnv(rank_, size_, Name(backend()));
  });
  return trace_.get();
}

void Communicator::InheritTrace(Communicator& parent) {
  if (parent.trace() == nullptr) return;
  std::call_once(trace_once_, [&] { trace_ = parent.trace_; });
}

std::function<absl::Status()> Communicator::Traced(const char* name, void* stream, std::function<absl::Status()> op) {
  const trace::Call call = trace::TakeCall();
  if (trace() == nullptr) return op;
  std::string args = absl::StrFormat("\"backend\":\"%s\",\"engine\":\"%s\",\"memory\":\"%s\",\"comm_rank\":%d,"
                                     "\"comm_size\":%d", Name(backend()), engine(), Name(memory()), rank_, size_);
  if (call.set) {
    const auto t = static_cast<DataType>(call.dtype);
    absl::StrAppendFormat(&args, ",\"count\":%zu,\"bytes\":%zu,\"dtype\":\"%s\"", call.count,
                          call.count * ElementSize(t), Name(t));
    if (call.op >= 0) absl::StrAppendFormat(&args, ",\"op\":\"%s\"", Name(static_cast<RedOp>(call.op)));
    if (call.root >= 0) absl::StrAppendFormat(&args, ",\"peer_or_root\":%d", call.root);
    if (call.tag >= 0) absl::StrAppendFormat(&args, ",\"tag\":%d", call.tag);
  }
  if (const std::string& label = trace::CurrentLabel(); !label.empty()) {
    absl::StrAppendFormat(&args, ",\"label\":\"%s\"", trace::Escape(label));
  }
  // CUDA: the span is the enqueue on the cudaStream_t, not the transfer.
  const bool queued = stream != nullptr && memory() == MemKind::kHost;
  if (memory() == MemKind::kCuda) args += ",\"enqueue_only\":true";
  return [sink = trace_, name, queued, issued = trace::NowNs(), args = std::move(args),
          op = std::move(op)]() mutable -> absl::Status {
    const int64_t start = trace::NowNs();
    if (queued) sink->Async("queued", "host_stream", issued, start, absl::StrFormat("\"call\":\"%s\",%s", name, args));
    absl::Status s = op();
    if (!s.ok()) absl::StrAppendFormat(&args, ",\"error\":\"%s\"", trace::Escape(s.ToString()));
    sink->Complete(name, "collective", start, trace::NowNs(), std::move(args));
    return s;
  };
}

}  // namespace weft
