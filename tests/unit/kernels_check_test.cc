// Argument checking and dispatch of kernels/kernels.h: every refusal names
// the argument, memory kinds route to host or device, host streams defer
// the work. Device routing is observed through a recording hook table and a
// pointer classifier that calls one buffer "device memory"; no GPU needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "core/stream.h"
#include "kernels/copy_plan.h"
#include "kernels/device.h"
#include "kernels/kernels.h"

namespace weft {
namespace kernels {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

class KernelsCheck : public ::testing::Test {
 protected:
  std::vector<float> a = std::vector<float>(8, 1.0f), b = std::vector<float>(5, 2.0f);
  std::vector<float> out = std::vector<float>(13, 0.0f);
  std::vector<TensorRef> srcs() { return {{a.data(), 8, DataType::kFloat32}, {b.data(), 5, DataType::kFloat32}}; }
};

TEST_F(KernelsCheck, NullDataWithCountIsNamed) {
  std::vector<TensorRef> s = srcs();
  s[1].data = nullptr;
  absl::Status st = Flatten(s, out.data(), DataType::kFloat32, nullptr, 1.0f, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st), HasSubstr("srcs[1].data is NULL"));
  st = Flatten(srcs(), nullptr, DataType::kFloat32, nullptr, 1.0f, nullptr);
  EXPECT_THAT(Message(st), HasSubstr("dst is NULL"));
  // Nothing to copy: NULL is fine.
  std::vector<TensorRef> empty = {{nullptr, 0, DataType::kFloat32}};
  EXPECT_TRUE(Flatten(empty, nullptr, DataType::kFloat32, nullptr, 1.0f, nullptr).ok());
}

TEST_F(KernelsCheck, BadDtypesAreNamed) {
  std::vector<TensorRef> s = srcs();
  s[0].dtype = static_cast<DataType>(42);
  EXPECT_THAT(Message(Flatten(s, out.data(), DataType::kFloat32, nullptr, 1.0f, nullptr)),
              HasSubstr("srcs[0].dtype = 42 is not a valid"));
  EXPECT_THAT(Message(Flatten(srcs(), out.data(), DataType::kInt32, nullptr, 1.0f, nullptr)),
              HasSubstr("dst_dtype = int32 is not supported"));
  int found = 0;
  EXPECT_THAT(Message(UnscaleCheckFinite({{a.data(), 2, DataType::kFloat64}}, 1.0f, &found, nullptr)),
              HasSubstr("tensors[0].dtype = float64 is not supported"));
}

TEST_F(KernelsCheck, OverlapIsRefused) {
  // The destination region of srcs[1] covers a.
  std::vector<size_t> offsets = {0, 0};
  std::vector<TensorRef> s = {{b.data(), 5, DataType::kFloat32}, {out.data() + 8, 5, DataType::kFloat32}};
  absl::Status st = Flatten(s, out.data(), DataType::kFloat32, nullptr, 1.0f, nullptr);
  EXPECT_THAT(Message(st), HasSubstr("srcs[1]"));
  EXPECT_THAT(Message(st), HasSubstr("overlaps dst region of srcs[1]"));
  // Sources out of address order, one of them inside the bucket's span
  // (between two destination regions, not at either end).
  std::vector<float> big(40, 1.0f);
  std::vector<size_t> spread = {0, 8, 20};
  std::vector<TensorRef> unordered = {{b.data(), 5, DataType::kFloat32},
                                      {a.data(), 8, DataType::kFloat32},
                                      {big.data() + 12, 4, DataType::kFloat32}};
  if (b.data() < a.data()) std::swap(unordered[0], unordered[1]);  // a descending pair, whatever malloc did
  st = Flatten(unordered, big.data(), DataType::kFloat32, spread.data(), 1.0f, nullptr);
  EXPECT_THAT(Message(st), HasSubstr("srcs[2]"));
  EXPECT_THAT(Message(st), HasSubstr("overlaps dst region of srcs[1]"));
  // Two tensors written to the same place.
  st = Flatten(srcs(), out.data(), DataType::kFloat32, offsets.data(), 1.0f, nullptr);
  EXPECT_THAT(Message(st), HasSubstr("dst region of srcs[1]"));
  EXPECT_THAT(Message(st), HasSubstr("overlaps dst region of srcs[0]"));
  // Unscale of one tensor listed twice.
  int found = 0;
  std::vector<TensorRef> twice = {{a.data(), 8, DataType::kFloat32}, {a.data() + 4, 4, DataType::kFloat32}};
  EXPECT_THAT(Message(UnscaleCheckFinite(twice, 0.5f, &found, nullptr)), HasSubstr("overlaps tensors[0]"));
  // Norm output on top of its input.
  float total = 0;
  EXPECT_THAT(Message(L2Norm(srcs(), a.data() + 1, &total, nullptr)), HasSubstr("norms"));
}

// Unflatten into tensors listed out of address order: the check sorts them,
// and the next call on this thread first tries the order that sort found.
// Reusing it must not let an overlap through, whether the overlapping list
// is still sorted by that order or not.
TEST_F(KernelsCheck, OverlapIsRefusedWhenTheLastSortOrderIsReused) {
  std::vector<float> pool(4 * 64, 0.0f), src(4 * 16, 1.0f);
  // Tensor i lives at pool slot place[i]: listed in the order 2, 0, 3, 1 of their addresses.
  const size_t place[] = {2, 0, 3, 1};
  auto dsts = [&](size_t first_len) {
    std::vector<TensorRef> d;
    for (size_t i = 0; i < 4; ++i) d.push_back({pool.data() + 64 * place[i], 16, DataType::kFloat32});
    d[0].count = first_len;
    return d;
  };
  for (int call = 0; call < 3; ++call) {
    std::vector<float> flat(4 * 16 + 48, 1.0f);
    std::vector<size_t> offsets = {0, 64, 80, 96};
    EXPECT_TRUE(Unflatten(flat.data(), DataType::kFloat32, offsets.data(), dsts(64), 1.0f, false, nullptr).ok());
  }
  // Same order of addresses, but tensor 0 (slot 2) now runs into tensor 2 (slot 3).
  std::vector<float> flat(4 * 16 + 64, 1.0f);
  std::vector<size_t> offsets = {0, 65, 81, 97};
  absl::Status st = Unflatten(flat.data(), DataType::kFloat32, offsets.data(), dsts(65), 1.0f, false, nullptr);
  EXPECT_THAT(Message(st), HasSubstr("dsts[2]"));
  EXPECT_THAT(Message(st), HasSubstr("overlaps dsts[0]"));
  // A different order of as many tensors: tensor 1 moved into tensor 2's slot, 8 elements in.
  std::vector<TensorRef> d = dsts(16);
  d[1].data = pool.data() + 64 * 3 + 8;
  st = Unflatten(src.data(), DataType::kFloat32, nullptr, d, 1.0f, false, nullptr);
  EXPECT_THAT(Message(st), HasSubstr("dsts[1]"));
  EXPECT_THAT(Message(st), HasSubstr("overlaps dsts[2]"));
  // And the first list again, fine again.
  EXPECT_TRUE(Unflatten(src.data(), DataType::kFloat32, nullptr, dsts(16), 1.0f, false, nullptr).ok());
}

TEST_F(KernelsCheck, MisalignedAndChunkArgumentsAreNamed) {
  std::vector<TensorRef> s = srcs();
  s[1].data = reinterpret_cast<char*>(b.data()) + 1;
  EXPECT_THAT(Message(Flatten(s, out.data(), DataType::kFloat32, nullptr, 1.0f, nullptr)),
              HasSubstr("srcs[1].data"));
  EXPECT_THAT(Message(ChunkCat(srcs(), 0, nullptr, out.data(), DataType::kFloat32, 1.0f, nullptr)),
              HasSubstr("world = 0"));
  std::vector<size_t> chunks = {4, 2};  // 2 * 2 < 5
  EXPECT_THAT(Message(ChunkCat(srcs(), 2, chunks.data(), out.data(), DataType::kFloat32, 1.0f, nullptr)),
              HasSubstr("chunk_counts[1] = 2 with world = 2 does not cover srcs[1].count = 5"));
  EXPECT_THAT(Message(UnscaleCheckFinite(srcs(), 1.0f, nullptr, nullptr)), HasSubstr("found_inf is NULL"));
  EXPECT_THAT(Message(L2Norm(srcs(), nullptr, nullptr, nullptr)), HasSubstr("total is NULL"));
}

TEST_F(KernelsCheck, ForeignStreamIsRefusedForHostMemory) {
  int not_a_stream = 0;
  absl::Status st = Flatten(srcs(), out.data(), DataType::kFloat32, nullptr, 1.0f, &not_a_stream);
  EXPECT_THAT(Message(st), HasSubstr("is not a live weft host stream"));
}

TEST_F(KernelsCheck, HostStreamRunsTheWorkLater) {
  HostStream stream;
  ASSERT_TRUE(Flatten(srcs(), out.data(), DataType::kFloat32, nullptr, 0.5f, &stream).ok());
  ASSERT_TRUE(stream.Synchronize().ok());
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[12], 1.0f);
  float total = 0;
  ASSERT_TRUE(L2Norm(srcs(), nullptr, &total, &stream).ok());
  ASSERT_TRUE(stream.Synchronize().ok());
  EXPECT_EQ(total, std::sqrt(8.0f + 5 * 4.0f));
}

// A pointer classifier that calls [device_begin, device_end) device memory.
uintptr_t device_begin = 0, device_end = 0;
PointerKind FakeClassifier(const void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  return u >= device_begin && u < device_end ? PointerKind::kDevice : PointerKind::kHost;
}

struct Recorded {
  std::vector<Segment> segments;
  float scale = 0;
  bool accumulate = false;
  void* stream = nullptr;
} recorded;

int RecordCopy(const Segment* s, size_t n, float scale, bool accumulate, void* stream) {
  recorded.segments.assign(s, s + n);
  recorded.scale = scale;
  recorded.accumulate = accumulate;
  recorded.stream = stream;
  return 0;
}
int FailUnscale(const TensorRef*, size_t, float, int*, void*) { return 700; }
int RecordNorm(const TensorRef*, size_t, float*, float*, void*) { return 0; }

// A fake device plan: the segments it was made from, and what each hook saw.
struct FakePlan {
  std::vector<Segment> segments;
  bool accumulate = false;
};
struct PlanCalls {
  int created = 0, destroyed = 0;
  const void* last_run = nullptr;
} plan_calls;

int RecordPlanCreate(const Segment* s, size_t n, bool accumulate, void** plan) {
  ++plan_calls.created;
  *plan = new FakePlan{std::vector<Segment>(s, s + n), accumulate};
  return 0;
}
// A run copies nothing: it records what the device would run, as RecordCopy does.
int RecordPlanRun(const void* plan, float scale, void* stream) {
  const auto* p = static_cast<const FakePlan*>(plan);
  plan_calls.last_run = plan;
  recorded.segments = p->segments;
  recorded.scale = scale;
  recorded.accumulate = p->accumulate;
  recorded.stream = stream;
  return 0;
}
int RecordPlanDestroy(void* plan) {
  ++plan_calls.destroyed;
  delete static_cast<FakePlan*>(plan);
  return 0;
}
const char* ErrorString(int code) { return code == 700 ? "an illegal memory access was encountered" : "?"; }
const DeviceKernels kRecording = {"fake-device", RecordCopy,    FailUnscale,       RecordNorm,
                                  RecordPlanCreate, RecordPlanRun, RecordPlanDestroy, ErrorString};

class KernelsDeviceRouting : public KernelsCheck {
 protected:
  std::vector<float> dev = std::vector<float>(64, 0.0f);  // plays device memory
  void SetUp() override {
    device_begin = reinterpret_cast<uintptr_t>(dev.data());
    device_end = device_begin + dev.size() * sizeof(float);
    SetPointerClassifier(FakeClassifier);
    previous_ = GetDeviceKernels();
  }
  void TearDown() override {
    SetPointerClassifier(nullptr);
    RegisterDeviceKernels(previous_);
  }
  const DeviceKernels* previous_ = nullptr;
};

TEST_F(KernelsDeviceRouting, MixedKindsAreRefused) {
  RegisterDeviceKernels(&kRecording);
  absl::Status st = Flatten(srcs(), dev.data(), DataType::kFloat32, nullptr, 1.0f, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(st), HasSubstr("mixed memory kinds"));
  EXPECT_THAT(Message(st), HasSubstr("srcs[0]"));
}

TEST_F(KernelsDeviceRouting, DeviceMemoryGoesToTheHooks) {
  RegisterDeviceKernels(&kRecording);
  std::vector<TensorRef> s = {{dev.data(), 8, DataType::kFloat32}, {dev.data() + 8, 5, DataType::kFloat32}};
  int cuda_stream_stand_in = 0;
  ASSERT_TRUE(Flatten(s, dev.data() + 16, DataType::kBfloat16, nullptr, 0.25f, &cuda_stream_stand_in).ok());
  ASSERT_EQ(recorded.segments.size(), 2u);
  EXPECT_EQ(recorded.segments[1].src, dev.data() + 8);
  EXPECT_EQ(recorded.segments[1].dst, reinterpret_cast<char*>(dev.data() + 16) + 8 * 2);
  EXPECT_EQ(recorded.segments[1].count, 5u);
  EXPECT_EQ(recorded.scale, 0.25f);
  EXPECT_EQ(recorded.stream, &cuda_stream_stand_in);

  int* found = reinterpret_cast<int*>(dev.data() + 40);
  absl::Status st = UnscaleCheckFinite(s, 0.5f, found, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnknown);
  EXPECT_THAT(Message(st), HasSubstr("fake-device kernels failed: an illegal memory access"));

  HostStream hs;
  st = Flatten(s, dev.data() + 16, DataType::kFloat32, nullptr, 1.0f, &hs);
  EXPECT_THAT(Message(st), HasSubstr("is a weft host stream, but the buffers are in CUDA memory"));
}

TEST_F(KernelsDeviceRouting, PlansOnDeviceMemoryGoToTheHooksOnEveryRun) {
  RegisterDeviceKernels(&kRecording);
  plan_calls = {};
  std::vector<TensorRef> s = {{dev.data(), 8, DataType::kFloat32}, {dev.data() + 8, 5, DataType::kFloat32}};
  absl::StatusOr<CopyPlan> plan = CopyPlan::Unflatten(dev.data() + 16, DataType::kFloat32, nullptr, s, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->memory(), MemKind::kCuda);
  EXPECT_EQ(plan_calls.created, 1);
  int cuda_stream_stand_in = 0;
  for (float scale : {0.5f, 2.0f}) {
    recorded = {};
    plan_calls.last_run = nullptr;
    ASSERT_TRUE(plan->Run(scale, &cuda_stream_stand_in).ok());
    EXPECT_NE(plan_calls.last_run, nullptr) << "a run must go to the device plan, not rebuild its segments";
    ASSERT_EQ(recorded.segments.size(), 2u);
    EXPECT_EQ(recorded.segments[1].src, dev.data() + 24);
    EXPECT_EQ(recorded.segments[1].dst, dev.data() + 8);
    EXPECT_EQ(recorded.scale, scale);
    EXPECT_TRUE(recorded.accumulate);
    EXPECT_EQ(recorded.stream, &cuda_stream_stand_in);
  }
  EXPECT_EQ(plan_calls.created, 1) << "the device plan is made once, at creation";
  HostStream hs;
  absl::Status st = plan->Run(1.0f, &hs);
  EXPECT_THAT(Message(st), HasSubstr("is a weft host stream, but the buffers are in CUDA memory"));
  {
    // Copies share the device plan; the last one to go frees it, once.
    CopyPlan copy = *plan;
    plan = CopyPlan();
    EXPECT_EQ(plan_calls.destroyed, 0);
    ASSERT_TRUE(copy.Run(1.0f, &cuda_stream_stand_in).ok());
  }
  EXPECT_EQ(plan_calls.destroyed, 1);

  absl::StatusOr<CopyPlan> mixed = CopyPlan::Flatten(srcs(), dev.data(), DataType::kFloat32, nullptr);
  EXPECT_THAT(Message(mixed.status()), HasSubstr("mixed memory kinds"));
  RegisterDeviceKernels(nullptr);
  absl::StatusOr<CopyPlan> none = CopyPlan::Flatten(s, dev.data() + 16, DataType::kFloat32, nullptr);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(none.status()), HasSubstr("no device kernels"));
}

TEST_F(KernelsDeviceRouting, WithoutDeviceKernelsDeviceMemoryIsUnsupported) {
  RegisterDeviceKernels(nullptr);
  std::vector<TensorRef> s = {{dev.data(), 8, DataType::kFloat32}};
  absl::Status st = Flatten(s, dev.data() + 16, DataType::kFloat32, nullptr, 1.0f, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(st), HasSubstr("no device kernels"));
}

}  // namespace
}  // namespace kernels
}  // namespace weft
