// The kernels' C ABI: list arguments refused with their names, results
// through weftGetLastError, and the same results as the C++ entry points.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "weft/weft.h"

namespace {

std::string LastError() { return weftGetLastError(); }

TEST(KernelsCapi, ListArgumentsAreChecked) {
  std::vector<float> dst(4);
  EXPECT_EQ(weftFlatten(nullptr, 2, dst.data(), weftFloat32, nullptr, 1.0f, nullptr), weftInvalidArgument);
  EXPECT_NE(LastError().find("srcs is NULL with n = 2"), std::string::npos) << LastError();
  weftTensor_t t = {dst.data(), 4, weftFloat32};
  EXPECT_EQ(weftL2Norm(&t, -1, nullptr, nullptr, nullptr), weftInvalidArgument);
  EXPECT_NE(LastError().find("n = -1 is negative"), std::string::npos) << LastError();
  EXPECT_EQ(weftUnflatten(dst.data(), static_cast<weftDataType_t>(9), nullptr, &t, 1, 1.0f, 0, nullptr),
            weftInvalidArgument);
  EXPECT_NE(LastError().find("weftUnflatten"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("src_dtype = 9"), std::string::npos) << LastError();
  // n = 0 with NULL lists is an empty call.
  EXPECT_EQ(weftFlatten(nullptr, 0, nullptr, weftBfloat16, nullptr, 1.0f, nullptr), weftSuccess);
}

TEST(KernelsCapi, RoundTripThroughBfloat16WithScaling) {
  std::vector<float> a = {1, 2, 3}, b = {-4, 5};
  weftTensor_t srcs[2] = {{a.data(), 3, weftFloat32}, {b.data(), 2, weftFloat32}};
  std::vector<uint16_t> flat(5, 0xffff);
  ASSERT_EQ(weftFlatten(srcs, 2, flat.data(), weftBfloat16, nullptr, 0.5f, nullptr), weftSuccess);
  EXPECT_EQ(flat[0], 0x3f00);  // 0.5
  EXPECT_EQ(flat[3], 0xc000);  // -2
  ASSERT_EQ(weftUnflatten(flat.data(), weftBfloat16, nullptr, srcs, 2, 2.0f, 1, nullptr), weftSuccess);
  EXPECT_EQ(a, (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(b, (std::vector<float>{-8, 10}));
  int found = 0;
  ASSERT_EQ(weftUnscaleCheckFinite(srcs, 2, 0.5f, &found, nullptr), weftSuccess);
  EXPECT_EQ(found, 0);
  float norms[2], total = 0;
  ASSERT_EQ(weftL2Norm(srcs, 2, norms, &total, nullptr), weftSuccess);
  EXPECT_EQ(norms[1], std::sqrt(16.0f + 25.0f));
  EXPECT_EQ(total, std::sqrt(1.0f + 4 + 9 + 16 + 25));
}

TEST(KernelsCapi, ChunkCatAndSplitOnAHostStream) {
  weftStream_t stream;
  ASSERT_EQ(weftStreamCreate(&stream), weftSuccess);
  std::vector<float> a = {0, 1, 2, 3, 4}, slab(6, -1.0f), back(5, -1.0f);
  weftTensor_t src = {a.data(), 5, weftFloat32}, dst = {back.data(), 5, weftFloat32};
  ASSERT_EQ(weftChunkCat(&src, 1, 2, nullptr, slab.data(), weftFloat32, 1.0f, stream), weftSuccess);
  ASSERT_EQ(weftChunkSplit(slab.data(), weftFloat32, 2, nullptr, &dst, 1, 1.0f, 0, stream), weftSuccess);
  ASSERT_EQ(weftStreamSynchronize(stream), weftSuccess);
  EXPECT_EQ(slab, (std::vector<float>{0, 1, 2, 3, 4, 0}));
  EXPECT_EQ(back, a);
  ASSERT_EQ(weftStreamDestroy(stream), weftSuccess);
}

TEST(KernelsCapi, CopyPlansRunAgainWithNewContents) {
  std::vector<float> a = {1, 2, 3}, b = {-4, 5};
  weftTensor_t srcs[2] = {{a.data(), 3, weftFloat32}, {b.data(), 2, weftFloat32}};
  std::vector<uint16_t> flat(7, 0xffff);
  const size_t offsets[2] = {0, 5};  // a gap of two elements stays untouched
  weftCopyPlan_t fill = nullptr, out = nullptr;
  ASSERT_EQ(weftFlattenPlanCreate(srcs, 2, flat.data(), weftBfloat16, offsets, &fill), weftSuccess);
  ASSERT_EQ(weftUnflattenPlanCreate(flat.data(), weftBfloat16, offsets, srcs, 2, 1, &out), weftSuccess);
  ASSERT_EQ(weftCopyPlanExecute(fill, 0.5f, nullptr), weftSuccess);
  EXPECT_EQ(flat, (std::vector<uint16_t>{0x3f00, 0x3f80, 0x3fc0, 0xffff, 0xffff, 0xc000, 0x4020}));
  a[0] = 8;  // the plan reads the buffers' current contents
  ASSERT_EQ(weftCopyPlanExecute(fill, 1.0f, nullptr), weftSuccess);
  EXPECT_EQ(flat[0], 0x4100);  // 8
  ASSERT_EQ(weftCopyPlanExecute(out, 1.0f, nullptr), weftSuccess);  // accumulates: a += flat
  EXPECT_EQ(a, (std::vector<float>{16, 4, 6}));
  EXPECT_EQ(b, (std::vector<float>{-8, 10}));

  weftStream_t stream;
  ASSERT_EQ(weftStreamCreate(&stream), weftSuccess);
  ASSERT_EQ(weftCopyPlanExecute(fill, 2.0f, stream), weftSuccess);
  ASSERT_EQ(weftCopyPlanDestroy(fill), weftSuccess);  // the enqueued run keeps what it needs
  ASSERT_EQ(weftStreamSynchronize(stream), weftSuccess);
  EXPECT_EQ(flat[0], 0x4200);  // 32
  ASSERT_EQ(weftStreamDestroy(stream), weftSuccess);
  ASSERT_EQ(weftCopyPlanDestroy(out), weftSuccess);
  EXPECT_EQ(weftCopyPlanExecute(out, 1.0f, nullptr), weftInvalidArgument);
  EXPECT_NE(LastError().find("not a live handle"), std::string::npos) << LastError();
}

}  // namespace
