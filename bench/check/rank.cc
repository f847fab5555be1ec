#include "bench/check/rank.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/check/beat_channel.h"
#include "bench/check/memory.h"
#include "core/status.h"

namespace weft_check {

absl::Status WeftError(const std::string& what, weftResult_t r) {
  if (r == weftSuccess) return absl::OkStatus();
  const std::string detail = weftGetLastError();
  return weft::SystemError("%s: %s (%s)", what, detail, weftGetErrorString(r));
}

absl::Status Rank::Call(const std::string& what, const std::function<weftResult_t()>& call) {
  const long long seq = ++seq_;
  if (hb_) hb_->Enter(seq, what);
  const weftResult_t r = call();
  // On CUDA memory a call returns once enqueued: it is complete when the device is done with it.
  const absl::Status s = r != weftSuccess ? WeftError(what, r) : Finish(o_.memory, o_.timeout_ms);
  if (!s.ok()) {
    if (hb_) hb_->SetState("failed: " + std::string(s.message()));
    return r != weftSuccess ? s : absl::Status(s.code(), what + ": " + std::string(s.message()));
  }
  if (hb_) hb_->Complete(seq);
  return absl::OkStatus();
}

std::vector<Beat> Rank::Beats() const {
  return server_ != nullptr ? server_->Beats(nranks_) : ReadBeats(dir_, nranks_);
}

absl::StatusOr<std::vector<std::string>> Rank::Gather(weftComm_t comm, int n, const std::string& mine,
                                                      const std::string& what) {
  constexpr int kCopies = 3;
  // The longest string first (as 8 decimal digits, three copies), then the
  // strings padded to it.
  const auto exchange = [&](const std::string& block, const std::string& name)
      -> absl::StatusOr<std::vector<std::string>> {
    std::string send;
    for (int c = 0; c < kCopies; ++c) send += block;
    std::string recv(send.size() * n, '\0');
    ASSIGN_OR_RETURN(const Buffer sent, Buffer::Make(o_.memory, send.size()));
    ASSIGN_OR_RETURN(const Buffer got, Buffer::Make(o_.memory, recv.size()));
    RETURN_IF_ERROR(sent.Upload(send.data()));
    RETURN_IF_ERROR(Call(what + " (" + name + ")", [&] {
      return weftAllGather(sent.data(), got.data(), send.size(), weftUint8, comm, nullptr);
    }));
    RETURN_IF_ERROR(got.Download(recv.data()));
    std::vector<std::string> out(n, std::string(block.size(), '\0'));
    for (int r = 0; r < n; ++r) {
      const char* base = recv.data() + static_cast<size_t>(r) * send.size();
      for (size_t i = 0; i < block.size(); ++i) {
        const char a = base[i], b = base[block.size() + i], c = base[2 * block.size() + i];
        out[r][i] = (a == b || a == c) ? a : b;  // two of three agree
      }
    }
    return out;
  };
  ASSIGN_OR_RETURN(std::vector<std::string> lengths, exchange(absl::StrFormat("%08zu", mine.size()), "sizes"));
  size_t longest = 0;
  std::vector<size_t> size(n);
  for (int r = 0; r < n; ++r) {
    size[r] = std::strtoull(lengths[r].c_str(), nullptr, 10);
    longest = std::max(longest, size[r]);
  }
  std::string padded = mine;
  padded.resize(longest, '\0');
  ASSIGN_OR_RETURN(std::vector<std::string> all, exchange(padded, "data"));
  for (int r = 0; r < n; ++r) all[r].resize(size[r]);
  return all;
}

absl::Status Rank::Start(bool* made_dir) {
  *made_dir = false;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  me_.rank = rank_;
  me_.node = host;
  me_.device = "cpu";
  if (o_.memory == weftMemoryCuda) {
    int device = -1;
    RETURN_IF_ERROR(WeftError("weftCommGetCudaDevice", weftCommGetCudaDevice(world_, &device)));
    RETURN_IF_ERROR(UseDevice(device));  // this thread's buffers go where the communicator works
    me_.device = absl::StrFormat("cuda:%d", device);
  }
  // Who is where, before the heartbeat runs: these first calls go unrecorded.
  me_.cores = static_cast<int>(std::thread::hardware_concurrency());
  ASSIGN_OR_RETURN(std::vector<std::string> ids,
                   Gather(absl::StrFormat("%s\t%s\t%d", me_.node, me_.device, me_.cores), "identities"));
  everyone_.resize(nranks_);
  std::map<std::string, int> per_node;
  for (int r = 0; r < nranks_; ++r) {
    const std::vector<std::string> f = absl::StrSplit(ids[r], '\t');
    Identity& id = everyone_[r];
    id.rank = r;
    id.node = f[0];
    id.device = f.size() > 1 ? f[1] : "";
    if (f.size() < 3 || !absl::SimpleAtoi(f[2], &id.cores)) id.cores = 0;
    if (++per_node[id.node] > id.cores) oversubscribed_ = true;
  }
  // Where the heartbeat goes: the operator's directory; on one node one rank
  // 0 makes under /tmp; across nodes rank 0's TCP listener.
  std::string where = o_.heartbeat_dir;
  absl::Status failed;  // rank 0's, told to every rank as an empty `where`
  if (where.empty() && rank_ == 0) {
    if (per_node.size() > 1) {
      absl::StatusOr<std::unique_ptr<BeatServer>> server = BeatServer::Start();
      if (server.ok()) {
        server_ = std::move(*server);
        where = server_->address();
      } else {
        failed = server.status();
      }
    } else {
      char tmpl[] = "/tmp/weft-check-XXXXXX";
      if (mkdtemp(tmpl) != nullptr) {
        where = tmpl;
        *made_dir = true;
      } else {
        failed = weft::SystemError("cannot make a heartbeat directory under /tmp: %s (pass --heartbeat DIR)",
                                   std::strerror(errno));
      }
    }
  }
  ASSIGN_OR_RETURN(std::vector<std::string> got, Gather(where, "agreeing on the heartbeat"));
  if (got[0].empty()) {
    return !failed.ok() ? failed : weft::RemoteError("rank 0 could not set up the heartbeat (its error says why)");
  }
  if (IsBeatAddress(got[0])) {
    channel_ = got[0];
    ASSIGN_OR_RETURN(std::unique_ptr<BeatLink> link, BeatLink::Connect(channel_, o_.timeout_ms));
    ASSIGN_OR_RETURN(hb_, Heartbeat::Start(std::move(link), rank_, me_.node, me_.device));
  } else {
    dir_ = got[0];
    channel_ = dir_;
    ASSIGN_OR_RETURN(hb_, Heartbeat::Start(dir_, rank_, me_.node, me_.device));
  }
  return absl::OkStatus();
}

}  // namespace weft_check
