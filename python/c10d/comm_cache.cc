// The out-of-band exchange: torch's Store as a weftStore_t, and the
// communicators of one group made through it.
#include "comm_cache.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <c10/util/Exception.h>

namespace weft_c10d {

std::string WeftError(const char* op, int rank, weftResult_t r) {
  const char* last = weftGetLastError();
  // A timeout also says " Timed out ", the words torch's own backends (and
  // the tools and tests that read their errors) use for one.
  return std::string("weft: ") + op + " failed on rank " + std::to_string(rank) +
         (r == weftTimeout ? ": Timed out " : " ") + "(" + weftGetErrorString(r) +
         "): " + (last && *last ? last : "no further detail");
}

namespace {

// weftStore_t's callbacks over a c10d::Store. They run on the thread that
// calls weftCommInitStore, during the call; a torch exception (the store's
// own timeout, a closed connection) becomes a non-zero result.
int StoreSet(void* ctx, const char* key, const void* value, size_t len) {
  try {
    auto* store = static_cast<c10d::Store*>(ctx);
    const auto* p = static_cast<const uint8_t*>(value);
    store->set(key, std::vector<uint8_t>(p, p + len));
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

int StoreGet(void* ctx, const char* key, void* value, size_t cap, size_t* len, int timeout_ms) {
  try {
    auto* store = static_cast<c10d::Store*>(ctx);
    store->wait({key}, timeout_ms < 0 ? c10d::Store::kNoTimeout : std::chrono::milliseconds(timeout_ms));
    std::vector<uint8_t> v = store->get(key);
    if (v.size() > cap) return 1;
    std::memcpy(value, v.data(), v.size());
    *len = v.size();
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

int ClampMs(std::chrono::milliseconds t) {
  return static_cast<int>(std::clamp<int64_t>(t.count(), 1, INT_MAX));
}

}  // namespace

CommCache::CommCache(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_ms_(ClampMs(timeout)) {
  host_ = Make("host", weftMemoryHost, -1);
}

CommCache::~CommCache() { Destroy(); }

// torch gives a group the same store prefix each time the job makes it
// again (after destroy_process_group, init_process_group names its groups
// as it did the first time, so that a recovering job's ranks agree), and the
// keys of the communicators made there before are still in the store: a
// rank reading one would join a communicator that is gone. So every making
// counts itself in the store, every rank of it once, and makes its keys
// under its own number. The count is kept per group size, so a group made
// again with another size cannot shift it.
std::string CommCache::Generation(const char* what) {
  int64_t made = 0;
  try {
    made = store_->add(std::string("weft/made/") + what + "/" + std::to_string(size_), 1);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "weft: rank ", rank_, ": making the ", what, " communicator: the store failed: ", e.what());
  }
  return std::to_string((made - 1) / size_);
}

weftComm_t CommCache::Make(const char* what, weftMemoryKind_t memory, int device) {
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.memory = memory;
  cfg.cuda_device = device;
  cfg.timeout_ms = timeout_ms_;
  cfg.bootstrap_timeout_ms = timeout_ms_;
  // Block, even where a node runs more ranks than cores (where weft's own
  // default is yield): here the ranks share the cores with the training
  // process's compute and with each other, and a rank that yields stays
  // runnable and takes its turns. Measured on 2 cores, 4 ranks, 4 KiB
  // all_gather_into_tensor under load: 0.12 ms blocking, 4-8 ms yielding,
  // gloo 1.5-3 ms (bench/results/torch.md). WEFT_WAIT, when set, decides
  // (weft reads and checks it).
  const char* env = std::getenv("WEFT_WAIT");
  cfg.wait = env != nullptr && *env != '\0' ? weftWaitDefault : weftWaitBlock;
  weftStore_t ws = WEFT_STORE_INITIALIZER;
  ws.ctx = store_.get();
  ws.set = StoreSet;
  ws.get = StoreGet;
  weftComm_t comm = nullptr;
  // The store is already this group's; the prefix tells its host and CUDA
  // communicators apart, and this making of one from an earlier one's.
  const std::string prefix = std::string(what) + "/" + Generation(what);
  weftResult_t r = weftCommInitStore(&comm, size_, rank_, &ws, prefix.c_str(), &cfg);
  TORCH_CHECK(r == weftSuccess, WeftError(memory == weftMemoryHost ? "init (host communicator)"
                                                                   : "init (CUDA communicator)", rank_, r));
  return comm;
}

weftComm_t CommCache::Cuda(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(!destroyed_, "weft: rank ", rank_, ": the process group was shut down");
  if (cuda_ == nullptr) {
    cuda_ = Make("cuda", weftMemoryCuda, device);
    cuda_device_ = device;
  }
  TORCH_CHECK(device == cuda_device_, "weft: this process group drives cuda:", cuda_device_, " on rank ", rank_,
              "; a tensor on cuda:", device, " needs a process group of its own");
  return cuda_;
}

void CommCache::Abort() {
  std::lock_guard<std::mutex> lock(mu_);
  if (host_) weftCommAbort(host_);
  if (cuda_) weftCommAbort(cuda_);
}

void CommCache::Destroy() {
  std::lock_guard<std::mutex> lock(mu_);
  if (host_) weftCommDestroy(host_);
  if (cuda_) weftCommDestroy(cuda_);
  host_ = cuda_ = nullptr;
  destroyed_ = true;
}

}  // namespace weft_c10d
