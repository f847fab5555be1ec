// The C ABI's versioned config structs and the descriptors that come with
// them, on a one-rank in-process communicator: weftConfig_t
// (weftCommInitInProcess), weftReducerConfig_t with the gradient list that
// the bucket plan lays out (weftReducerCreate, then one backward),
// weftShardGroupConfig_t with the parameter shapes of the shard layout
// (weftShardGroupCreate, then an unshard), and weftShardScheduleConfig_t.
// The size stamp is fuzzed too: a struct is allocated to exactly the size it
// claims, so weft reading more than a known size of it is an ASan report.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "capi/result.h"
#include "fuzz/input.h"
#include "weft/weft.h"

namespace {

using weft_fuzz::Buffer;
using weft_fuzz::Input;

weftComm_t World() {
  static weftComm_t comm = [] {
    weftComm_t c = nullptr;
    if (weftCommInitInProcess(&c, 1, nullptr) != weftSuccess) std::abort();
    return c;
  }();
  return comm;
}

// A caller's struct of type T: the stamp one of the sizes T has had (or any
// size now and then), the rest the fuzzer's bytes. `fix` overwrites the
// fields that are pointers, which a caller cannot get wrong at random.
template <typename T>
class Versioned {
 public:
  // The sizes weft knows, from the table it reads them with (capi/result.h),
  // so a version appended to the struct is fuzzed without editing this.
  explicit Versioned(Input& in) {
    const auto& sizes = weft::capi::SizedStruct<T>::kSizes;
    const size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
    size_t stamp = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegral<size_t>()
                                                             : sizes[in.ConsumeIntegralInRange<size_t>(0, nsizes - 1)];
    // An unknown stamp gets only its own 8 bytes: weft must read no more.
    known_ = false;
    for (size_t s : sizes) known_ |= s == stamp;
    buf_ = std::make_unique<Buffer>(known_ ? stamp : sizeof(size_t), 0);
    auto* p = static_cast<unsigned char*>(buf_->get());
    std::memcpy(p, &stamp, sizeof stamp);
    for (size_t i = sizeof stamp; i < buf_->bytes(); ++i) p[i] = in.ConsumeIntegral<unsigned char>();
  }
  const T* get() const { return static_cast<const T*>(buf_->get()); }
  // Writes `value` at `offset` if the caller's version has that field.
  template <typename F>
  void Set(size_t offset, F value) {
    if (known_ && offset + sizeof(F) <= buf_->bytes()) std::memcpy(static_cast<unsigned char*>(buf_->get()) + offset, &value, sizeof(F));
  }
  bool known() const { return known_; }

 private:
  std::unique_ptr<Buffer> buf_;
  bool known_ = false;
};

void CommConfig(Input& in) {
  Versioned<weftConfig_t> cfg(in);
  weftComm_t comm = nullptr;
  // At most one rank: a world of k fills k handles.
  const weftResult_t r = weftCommInitInProcess(&comm, in.ConsumeIntegralInRange<int>(-1, 1), cfg.get());
  FUZZ_EXPECT(cfg.known() || r != weftSuccess, "weftConfig_t with an unknown size stamp accepted");
  if (r == weftSuccess) {
    int n = 0;
    FUZZ_EXPECT(weftCommCount(comm, &n) == weftSuccess, "weftCommCount");
    FUZZ_EXPECT(n == 1, "a world of %d from weftCommInitInProcess(.., 1 ..)", n);
    weftCommDestroy(comm);
  }
}

void Reducer(Input& in) {
  const int n = in.ConsumeIntegralInRange<int>(-1, 6);
  std::vector<weftTensor_t> grads;
  std::vector<std::unique_ptr<Buffer>> mem;
  bool huge = false;
  for (int i = 0; i < n; ++i) {
    weftTensor_t t{};
    // Any type, valid or not: Create refuses the integer ones (and invalid
    // values) naming the gradient.
    const int dtype = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegral<int>() | 0x100
                                                                : in.ConsumeIntegralInRange<int>(0, weftNumTypes - 1);
    weft_fuzz::SetEnum(&t.dtype, dtype);
    t.count = in.Count(&huge);
    const bool big = t.count > weft_fuzz::kMaxRealCount;
    mem.push_back(std::make_unique<Buffer>(big ? 8 : t.count * weft_fuzz::ElementBytes(dtype)));
    if (!big) weft_fuzz::FillFinite(in, mem.back()->get(), t.count, dtype);
    t.data = mem.back()->get();
    grads.push_back(t);
  }
  Versioned<weftReducerConfig_t> cfg(in);
  static const char* const kNames[] = {"a", "b", "c", "d", "e", "f"};
  cfg.Set(offsetof(weftReducerConfig_t, names), in.ConsumeBool() ? kNames : nullptr);
  weftReducer_t red = nullptr;
  const weftReducerConfig_t* config = in.ConsumeBool() ? cfg.get() : nullptr;
  const weftResult_t r = weftReducerCreate(World(), grads.data(), n, config, &red);
  FUZZ_EXPECT(!(huge && r == weftSuccess), "a huge gradient count accepted by weftReducerCreate");
  FUZZ_EXPECT(config == nullptr || cfg.known() || r != weftSuccess, "weftReducerConfig_t with an unknown size accepted");
  if (r != weftSuccess) return;
  // One backward over the plan: every gradient's copy in and out goes
  // through the slot the bucket plan gave it. Over one rank the average is
  // the gradient itself, bit for bit, unless the config compresses it.
  const bool view = config != nullptr && config->gradient_as_bucket_view != 0;
  const bool exact = config == nullptr || (config->comm_dtype == WEFT_REDUCER_COMM_DTYPE_NATIVE && !view);
  std::vector<std::vector<unsigned char>> before;
  for (int i = 0; i < n; ++i) {
    const auto* p = static_cast<const unsigned char*>(mem[i]->get());
    before.emplace_back(p, p + mem[i]->bytes());
    void* grad = grads[i].data;
    if (view) {
      int bucket = -1;
      FUZZ_EXPECT(weftReducerGetGradSlot(red, i, &grad, &bucket) == weftSuccess, "weftReducerGetGradSlot(%d)", i);
    }
    FUZZ_EXPECT(weftReducerMarkReady(red, i, grad, nullptr) == weftSuccess, "weftReducerMarkReady(%d)", i);
  }
  FUZZ_EXPECT(weftReducerFinalize(red, nullptr) == weftSuccess, "weftReducerFinalize");
  for (int i = 0; exact && i < n; ++i) {
    if (before[i].empty()) continue;
    FUZZ_EXPECT(std::memcmp(mem[i]->get(), before[i].data(), before[i].size()) == 0,
                "gradient %d changed in an average over one rank", i);
  }
  FUZZ_EXPECT(weftReducerDestroy(red) == weftSuccess, "weftReducerDestroy");
}

void ShardGroup(Input& in) {
  const int n = in.ConsumeIntegralInRange<int>(-1, 5);
  std::vector<weftParamDesc_t> params(n > 0 ? n : 0);
  bool must_refuse = false;
  size_t total = 0;
  for (weftParamDesc_t& p : params) {
    p.name = nullptr;
    p.ndim = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? in.ConsumeIntegral<int>() : in.ConsumeIntegralInRange<int>(0, 4);
    if (p.ndim < 0 || p.ndim > WEFT_MAX_DIMS) must_refuse = true;
    size_t numel = 1;
    bool overflow = false;
    for (int d = 0; d < WEFT_MAX_DIMS; ++d) {
      const int64_t dim = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegral<int64_t>()
                                                                     : in.ConsumeIntegralInRange<int64_t>(0, 8);
      p.shape[d] = dim;
      if (d >= p.ndim) continue;
      if (dim < 0) must_refuse = true;
      if (dim > 0 && numel > (size_t{1} << 56) / static_cast<size_t>(dim)) overflow = true;
      else numel *= static_cast<size_t>(dim < 0 ? 0 : dim);
    }
    // A zero dimension anywhere makes an empty tensor, however large the others.
    bool empty = false;
    for (int d = 0; d < p.ndim && d < WEFT_MAX_DIMS; ++d) empty |= p.shape[d] == 0;
    if (empty) numel = 0;
    if (overflow && !empty) must_refuse = true;
    total += numel;
  }
  // A valid layout of millions of elements would allocate them: not this target's business.
  if (!must_refuse && total > 4096) return;
  Versioned<weftShardGroupConfig_t> cfg(in);
  const weftShardGroupConfig_t* config = in.ConsumeBool() ? cfg.get() : nullptr;
  weftShardGroup_t group = nullptr;
  const weftResult_t r = weftShardGroupCreate(World(), nullptr, params.data(), n, config, &group);
  FUZZ_EXPECT(!(must_refuse && r == weftSuccess), "a negative, oversized or overflowing shape accepted");
  FUZZ_EXPECT(config == nullptr || cfg.known() || r != weftSuccess, "weftShardGroupConfig_t with an unknown size accepted");
  if (r != weftSuccess) return;
  // One rank holds every element: the descriptors must say so.
  size_t held = 0;
  for (int i = 0; i < n; ++i) {
    weftShardDesc_t d{};
    FUZZ_EXPECT(weftShardGroupGetShard(group, i, &d) == weftSuccess, "weftShardGroupGetShard(%d)", i);
    held += d.length;
  }
  float* sp = nullptr;
  float* gp = nullptr;
  size_t count = 0;
  FUZZ_EXPECT(weftShardGroupGetBuffers(group, &sp, &gp, &count) == weftSuccess, "weftShardGroupGetBuffers");
  FUZZ_EXPECT(held == total && count >= total, "one rank holds %zu of %zu elements in a shard of %zu", held, total, count);
  if (count > 0) std::memset(sp, 0, count * sizeof(float));
  FUZZ_EXPECT(weftShardGroupUnshard(group, nullptr) == weftSuccess, "weftShardGroupUnshard");
  FUZZ_EXPECT(weftShardGroupReshard(group) == weftSuccess, "weftShardGroupReshard");
  FUZZ_EXPECT(weftShardGroupDestroy(group) == weftSuccess, "weftShardGroupDestroy");
}

void* Acquire(void*, weftShardGroup_t, size_t bytes) { return std::malloc(bytes == 0 ? 1 : bytes); }
void Release(void*, weftShardGroup_t, void* p) { std::free(p); }

void Schedule(Input& in) {
  Versioned<weftShardScheduleConfig_t> cfg(in);
  cfg.Set(offsetof(weftShardScheduleConfig_t, acquire), in.ConsumeBool() ? &Acquire : nullptr);
  cfg.Set(offsetof(weftShardScheduleConfig_t, release), in.ConsumeBool() ? &Release : nullptr);
  cfg.Set(offsetof(weftShardScheduleConfig_t, user), static_cast<void*>(nullptr));
  weftShardSchedule_t s = nullptr;
  const weftResult_t r = weftShardScheduleCreate(nullptr, cfg.get(), &s);
  FUZZ_EXPECT(cfg.known() || r != weftSuccess, "weftShardScheduleConfig_t with an unknown size accepted");
  if (r == weftSuccess) FUZZ_EXPECT(weftShardScheduleDestroy(s) == weftSuccess, "weftShardScheduleDestroy");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: CommConfig(in); break;
    case 1: Reducer(in); break;
    case 2: ShardGroup(in); break;
    default: Schedule(in); break;
  }
  return 0;
}
