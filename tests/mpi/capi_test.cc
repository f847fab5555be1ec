// The C ABI over MPI, through libweft.so and weft.h alone: weftCommInitWorld
// with backend auto picks MPI under mpiexec, and the entry points behave as
// weft.h says (results, errors naming the argument, split, host streams,
// timeouts). With WEFT_TEST_BACKEND=ucx the same entry points run on the UCX
// backend (config backend weftBackendUcx).
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "weft/weft.h"

namespace {

// The default config, with the backend WEFT_TEST_BACKEND names (auto if none).
weftConfig_t TestConfig() {
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  const char* b = std::getenv("WEFT_TEST_BACKEND");
  if (b != nullptr && std::string(b) == "ucx") cfg.backend = weftBackendUcx;
  return cfg;
}

struct World {
  weftComm_t comm = nullptr;
  int rank = -1, size = 0;
  explicit World(weftConfig_t cfg = TestConfig()) {
    EXPECT_EQ(weftCommInitWorld(&comm, &cfg), weftSuccess) << weftGetLastError();
    if (comm != nullptr) {
      weftCommUserRank(comm, &rank);
      weftCommCount(comm, &size);
    }
  }
  ~World() {
    if (comm != nullptr) {
      EXPECT_EQ(weftCommDestroy(comm), weftSuccess) << weftGetLastError();
    }
  }
};

bool LastErrorNames(const char* what) { return std::strstr(weftGetLastError(), what) != nullptr; }

TEST(MpiCApi, AutoPicksMpiAndSpansTheWorld) {
  World w;
  ASSERT_NE(w.comm, nullptr);
  weftBackend_t backend = weftBackendAuto;
  ASSERT_EQ(weftCommGetBackend(w.comm, &backend), weftSuccess);
  EXPECT_EQ(backend, weftBackendMpi);
  int mpi_rank = 0, mpi_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  EXPECT_EQ(w.rank, mpi_rank);
  EXPECT_EQ(w.size, mpi_size);
}

TEST(MpiCApi, CollectivesGiveTheDocumentedResults) {
  World w;
  ASSERT_NE(w.comm, nullptr);
  const int n = w.size, r = w.rank;
  // In-place float32 sum of small integers: exact.
  std::vector<float> g(4099);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((r + 1) * static_cast<int>(i % 13 + 1));
  ASSERT_EQ(weftAllReduce(g.data(), g.data(), g.size(), weftFloat32, weftSum, w.comm, nullptr), weftSuccess)
      << weftGetLastError();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], static_cast<float>(n * (n + 1) / 2 * (i % 13 + 1)));
  // int8 avg truncates toward zero (weft.h): ranks give -r, the average of 0..-(n-1).
  int8_t v = static_cast<int8_t>(-r), avg = 99;
  ASSERT_EQ(weftAllReduce(&v, &avg, 1, weftInt8, weftAvg, w.comm, nullptr), weftSuccess) << weftGetLastError();
  EXPECT_EQ(avg, static_cast<int8_t>(-(n * (n - 1) / 2) / n));
  // All-gather, reduce-scatter (max), broadcast.
  std::vector<int32_t> mine(3, r), all(3 * static_cast<size_t>(n), -1);
  ASSERT_EQ(weftAllGather(mine.data(), all.data(), 3, weftInt32, w.comm, nullptr), weftSuccess);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int32_t>(i / 3));
  std::vector<double> rs_in(2 * static_cast<size_t>(n)), rs_out(2, -1);
  for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<double>(i) * (r + 1);
  ASSERT_EQ(weftReduceScatter(rs_in.data(), rs_out.data(), 2, weftFloat64, weftMax, w.comm, nullptr), weftSuccess);
  EXPECT_EQ(rs_out[0], static_cast<double>(2 * r) * n);
  EXPECT_EQ(rs_out[1], static_cast<double>(2 * r + 1) * n);
  std::vector<uint16_t> b(100, static_cast<uint16_t>(r == n - 1 ? 0x3c00 : 0));  // float16 1.0 on the root
  ASSERT_EQ(weftBroadcast(b.data(), b.data(), b.size(), weftFloat16, n - 1, w.comm, nullptr), weftSuccess);
  for (uint16_t h : b) EXPECT_EQ(h, 0x3c00);
}

TEST(MpiCApi, BadArgumentsNameTheArgumentAndLeaveTheCommUsable) {
  World w;
  ASSERT_NE(w.comm, nullptr);
  float a[4] = {1, 1, 1, 1}, b[4];
  EXPECT_EQ(weftAllReduce(nullptr, b, 4, weftFloat32, weftSum, w.comm, nullptr), weftInvalidArgument);
  EXPECT_TRUE(LastErrorNames("sendbuf")) << weftGetLastError();
  EXPECT_EQ(weftAllReduce(a, b, 4, static_cast<weftDataType_t>(42), weftSum, w.comm, nullptr), weftInvalidArgument);
  EXPECT_TRUE(LastErrorNames("datatype")) << weftGetLastError();
  EXPECT_EQ(weftAllReduce(a, b, 4, weftFloat32, weftNumOps, w.comm, nullptr), weftInvalidArgument);
  EXPECT_TRUE(LastErrorNames("op")) << weftGetLastError();
  EXPECT_EQ(weftBroadcast(a, b, 4, weftFloat32, w.size, w.comm, nullptr), weftInvalidArgument);
  EXPECT_TRUE(LastErrorNames("root")) << weftGetLastError();
  EXPECT_EQ(weftAllGather(a, b, SIZE_MAX / 2, weftFloat32, w.comm, nullptr), weftInvalidArgument);
  EXPECT_TRUE(LastErrorNames("sendcount")) << weftGetLastError();
  EXPECT_EQ(weftAllReduce(a, b, 4, weftFloat32, weftSum, nullptr, nullptr), weftInvalidArgument);
  EXPECT_TRUE(LastErrorNames("comm")) << weftGetLastError();
  EXPECT_EQ(weftAllReduce(a, b, 4, weftFloat32, weftSum, w.comm, a), weftInvalidArgument);
  EXPECT_TRUE(LastErrorNames("stream")) << weftGetLastError();
  ASSERT_EQ(weftAllReduce(a, b, 4, weftFloat32, weftSum, w.comm, nullptr), weftSuccess) << weftGetLastError();
  for (float x : b) EXPECT_EQ(x, static_cast<float>(w.size));
}

TEST(MpiCApi, SplitAndHostStreams) {
  World w;
  ASSERT_NE(w.comm, nullptr);
  weftComm_t half = nullptr;
  ASSERT_EQ(weftCommSplit(w.comm, w.rank % 2, w.rank, &half), weftSuccess) << weftGetLastError();
  ASSERT_NE(half, nullptr);
  int count = 0;
  weftCommCount(half, &count);
  EXPECT_EQ(count, (w.size - w.rank % 2 + 1) / 2);
  weftStream_t s = nullptr;
  ASSERT_EQ(weftStreamCreate(&s), weftSuccess);
  std::vector<int64_t> x(1000, 1), y(1000, 2), z(5, w.rank);
  ASSERT_EQ(weftAllReduce(x.data(), x.data(), x.size(), weftInt64, weftSum, half, s), weftSuccess);
  ASSERT_EQ(weftAllReduce(y.data(), y.data(), y.size(), weftInt64, weftProd, w.comm, s), weftSuccess);
  ASSERT_EQ(weftAllReduce(z.data(), z.data(), z.size(), weftInt64, weftMax, w.comm, s), weftSuccess);
  ASSERT_EQ(weftStreamSynchronize(s), weftSuccess) << weftGetLastError();
  EXPECT_EQ(weftStreamQuery(s), weftSuccess);
  EXPECT_EQ(x[999], count);
  EXPECT_EQ(y[0], int64_t{1} << w.size);
  EXPECT_EQ(z[4], w.size - 1);
  weftResult_t async = weftInternalError;
  EXPECT_EQ(weftCommGetAsyncError(w.comm, &async), weftSuccess);
  EXPECT_EQ(async, weftSuccess);
  EXPECT_EQ(weftStreamDestroy(s), weftSuccess);
  EXPECT_EQ(weftCommDestroy(half), weftSuccess);
}

TEST(MpiCApi, LoneCollectiveTimesOut) {
  weftConfig_t cfg = TestConfig();
  cfg.timeout_ms = 300;
  World w(cfg);
  ASSERT_NE(w.comm, nullptr);
  if (w.size == 1 || w.rank != w.size - 1) return;
  float x = 1;
  EXPECT_EQ(weftAllReduce(&x, &x, 1, weftFloat32, weftSum, w.comm, nullptr), weftTimeout);
  EXPECT_TRUE(LastErrorNames(("rank " + std::to_string(w.rank)).c_str())) << weftGetLastError();
  EXPECT_TRUE(LastErrorNames("all_reduce")) << weftGetLastError();
  EXPECT_NE(weftAllReduce(&x, &x, 1, weftFloat32, weftSum, w.comm, nullptr), weftSuccess);
}

}  // namespace
