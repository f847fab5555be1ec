// The NCCL backend in one process: one rank on one device. Collectives are
// checked for exact results (one rank's all-reduce of x is x, bit for bit,
// for every op; the copies are copies), plus split, barrier, abort and
// argument errors. Without a device the init must fail with weftUnsupported
// and a message, which is checked here on any machine.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/nccl/comm.h"
#include "comm/registry.h"
#include "core/cuda/runtime.h"
#include "weft/weft.h"
#include "tests/gpu/gpu_test_util.h"

namespace weft {
namespace {

CommOptions CudaOptions() {
  CommOptions o;
  o.memory = MemKind::kCuda;
  o.timeout_ms = 60000;
  return o;
}

TEST(NcclInit, WithoutADeviceFailsWithUnsupported) {
  if (gputest::NoDeviceReason().empty()) GTEST_SKIP() << "a CUDA device is usable: this checks the no-device path";
  absl::StatusOr<std::unique_ptr<Communicator>> comm = InitWorld(Backend::kNccl, CudaOptions());
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kUnimplemented) << comm.status();
  EXPECT_NE(std::string(comm.status().message()).find("CUDA"), std::string::npos) << comm.status();

  // The same through the C ABI, with the reason in the thread's last error.
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.backend = weftBackendNccl;
  cfg.memory = weftMemoryCuda;
  weftComm_t c = nullptr;
  EXPECT_EQ(weftCommInitWorld(&c, &cfg), weftUnsupported);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(weftGetLastError()).find("CUDA"), std::string::npos) << weftGetLastError();
}

// The C ABI reports the device weft chose for cuda_device = -1 (one rank:
// device 0) and leaves it current on the calling thread (weft.h).
TEST(NcclInit, CApiReportsTheDeviceItChoseAndLeavesItCurrent) {
  WEFT_REQUIRE_GPU();
  weftConfig_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.backend = weftBackendNccl;
  cfg.memory = weftMemoryCuda;
  weftComm_t c = nullptr;
  ASSERT_EQ(weftCommInitWorld(&c, &cfg), weftSuccess) << weftGetLastError();
  int device = -7, current = -7;
  EXPECT_EQ(weftCommGetCudaDevice(c, &device), weftSuccess) << weftGetLastError();
  EXPECT_EQ(device, 0);
  EXPECT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, device);
  EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    WEFT_REQUIRE_GPU();
    absl::StatusOr<std::unique_ptr<Communicator>> c = InitWorld(Backend::kNccl, CudaOptions());
    ASSERT_TRUE(c.ok()) << c.status();
    comm_ = std::move(c).value();
    ASSERT_EQ(comm_->size(), 1);
    WEFT_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    comm_.reset();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  // Random bytes that are valid finite values of `t` (small integers, exact in every type).
  static std::vector<unsigned char> Input(DataType t, size_t count, std::mt19937_64& rng) {
    std::uniform_int_distribution<int> v(-100, 100);
    std::vector<unsigned char> out(count * ElementSize(t));
    for (size_t i = 0; i < count; ++i) {
      const int x = v(rng);
      unsigned char* p = out.data() + i * ElementSize(t);
      switch (t) {
        case DataType::kFloat32: { const float f = static_cast<float>(x); std::memcpy(p, &f, 4); break; }
        case DataType::kFloat64: { const double d = x; std::memcpy(p, &d, 8); break; }
        case DataType::kFloat16: { const uint16_t h = FloatToHalf(static_cast<float>(x)); std::memcpy(p, &h, 2); break; }
        case DataType::kBfloat16: { const uint16_t h = FloatToBf16(static_cast<float>(x)); std::memcpy(p, &h, 2); break; }
        case DataType::kInt8: { const int8_t k = static_cast<int8_t>(x); std::memcpy(p, &k, 1); break; }
        case DataType::kUint8: { const uint8_t k = static_cast<uint8_t>(x + 100); std::memcpy(p, &k, 1); break; }
        case DataType::kInt16: { const int16_t k = static_cast<int16_t>(x); std::memcpy(p, &k, 2); break; }
        case DataType::kInt32: { const int32_t k = x; std::memcpy(p, &k, 4); break; }
        case DataType::kInt64: { const int64_t k = x; std::memcpy(p, &k, 8); break; }
      }
    }
    return out;
  }

  // Runs `op(send, recv)` on device copies of `in` (out of place, or in place
  // when `in_place`) and returns what recv holds afterwards.
  template <class Op>
  std::vector<unsigned char> Run(const std::vector<unsigned char>& in, bool in_place, Op op) {
    const size_t bytes = in.size();
    void* send = nullptr;
    void* recv = nullptr;
    EXPECT_EQ(cudaMalloc(&send, bytes + 16), cudaSuccess);
    recv = send;
    if (!in_place) {
      EXPECT_EQ(cudaMalloc(&recv, bytes + 16), cudaSuccess);
    }
    EXPECT_EQ(cudaMemcpy(send, in.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    if (!in_place) {
      EXPECT_EQ(cudaMemset(recv, 0xA5, bytes + 16), cudaSuccess);  // poison
    }
    // The legacy stream's copy and memset may still be running (from pageable
    // memory cudaMemcpy returns once staged), and stream_ does not wait for them.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const absl::Status s = op(send, recv);
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<unsigned char> out(bytes);
    EXPECT_EQ(cudaMemcpy(out.data(), recv, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    (void)cudaFree(send);
    if (!in_place) (void)cudaFree(recv);
    return out;
  }

  std::unique_ptr<Communicator> comm_;
  cudaStream_t stream_ = nullptr;
};

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16, DataType::kFloat64,
                                  DataType::kInt8,    DataType::kUint8,   DataType::kInt32,    DataType::kInt64,
                                  DataType::kInt16};
constexpr size_t kCounts[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};

TEST_F(Nccl, AllReduceOfOneRankIsTheInputForEveryTypeAndOp) {
  std::mt19937_64 rng(201);
  for (DataType t : kAllTypes) {
    for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg}) {
      for (size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          const std::vector<unsigned char> in = Input(t, count, rng);
          const std::vector<unsigned char> out = Run(in, in_place, [&](void* s, void* r) {
            return comm_->AllReduce(s, r, count, t, op, stream_);
          });
          EXPECT_EQ(out, in) << Name(t) << " " << Name(op) << " count " << count << (in_place ? " in place" : "");
        }
      }
    }
  }
}

TEST_F(Nccl, ReduceScatterAllGatherBroadcastOfOneRankCopy) {
  std::mt19937_64 rng(202);
  // int16: NCCL has none; moved as bytes, reduced widened to int32.
  for (DataType t : {DataType::kBfloat16, DataType::kFloat32, DataType::kInt64, DataType::kInt16}) {
    for (size_t count : kCounts) {
      for (bool in_place : {false, true}) {
        const std::vector<unsigned char> in = Input(t, count, rng);
        const std::string what = std::string(Name(t)) + " count " + std::to_string(count);
        EXPECT_EQ(Run(in, in_place, [&](void* s, void* r) {
                    return comm_->ReduceScatter(s, r, count, t, RedOp::kSum, stream_);
                  }), in) << "reduce_scatter " << what;
        EXPECT_EQ(Run(in, in_place, [&](void* s, void* r) { return comm_->AllGather(s, r, count, t, stream_); }), in)
            << "all_gather " << what;
        EXPECT_EQ(Run(in, in_place, [&](void* s, void* r) { return comm_->Broadcast(s, r, count, t, 0, stream_); }),
                  in) << "broadcast " << what;
      }
    }
  }
}

TEST_F(Nccl, SplitBarrierAndHostPointerRefusal) {
  absl::StatusOr<std::unique_ptr<Communicator>> none = comm_->Split(-1, 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->get(), nullptr);
  absl::StatusOr<std::unique_ptr<Communicator>> sub = comm_->Split(3, 0);
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_NE(sub->get(), nullptr);
  EXPECT_EQ((*sub)->size(), 1);
  EXPECT_EQ((*sub)->backend(), Backend::kNccl);

  std::mt19937_64 rng(203);
  const std::vector<unsigned char> in = Input(DataType::kFloat32, 4099, rng);
  EXPECT_EQ(Run(in, false, [&](void* s, void* r) {
              return (*sub)->AllReduce(s, r, 4099, DataType::kFloat32, RedOp::kSum, stream_);
            }), in);
  EXPECT_TRUE(comm_->Barrier().ok());
  EXPECT_TRUE((*sub)->Barrier().ok());

  std::vector<float> host(16, 1.0f);
  const absl::Status bad = comm_->AllReduce(host.data(), host.data(), 16, DataType::kFloat32, RedOp::kSum, stream_);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(std::string(bad.message()).find("host memory"), std::string::npos) << bad;
  EXPECT_TRUE(comm_->Barrier().ok()) << "a bad argument must leave the communicator usable";
  EXPECT_TRUE(comm_->async_error().ok()) << comm_->async_error();
}

// config cuda_device -1 asks for the local rank's device; the communicator's
// options must then name the device chosen, because the reducer and shard
// groups put their streams and memory on options().cuda_device (on -1 they
// would take whatever device is current in their caller's thread, and NCCL
// would get streams of another device). Split communicators keep it.
TEST_F(Nccl, OptionsNameTheDeviceChosen) {
  ASSERT_EQ(CudaOptions().cuda_device, -1);
  auto* nccl = dynamic_cast<nccl::NcclComm*>(comm_.get());
  ASSERT_NE(nccl, nullptr);
  EXPECT_GE(nccl->device(), 0);
  EXPECT_EQ(comm_->options().cuda_device, nccl->device());
  absl::StatusOr<std::unique_ptr<Communicator>> sub = comm_->Split(0, 0);
  ASSERT_TRUE(sub.ok()) << sub.status();
  ASSERT_NE(sub->get(), nullptr);
  EXPECT_EQ((*sub)->options().cuda_device, nccl->device());
}

// A zero-count call may pass NULL buffers (an empty bucket, an empty shard):
// NCCL must see nothing to do, not a bad pointer.
TEST_F(Nccl, ZeroCountCallsTakeNullBuffers) {
  EXPECT_TRUE(comm_->AllReduce(nullptr, nullptr, 0, DataType::kBfloat16, RedOp::kAvg, stream_).ok());
  EXPECT_TRUE(comm_->ReduceScatter(nullptr, nullptr, 0, DataType::kFloat32, RedOp::kSum, stream_).ok());
  EXPECT_TRUE(comm_->AllGather(nullptr, nullptr, 0, DataType::kFloat16, stream_).ok());
  EXPECT_TRUE(comm_->Broadcast(nullptr, nullptr, 0, DataType::kInt64, 0, stream_).ok());
  EXPECT_TRUE(comm_->AllReduce(nullptr, nullptr, 0, DataType::kInt16, RedOp::kMax, stream_).ok());
  EXPECT_TRUE(comm_->ReduceScatter(nullptr, nullptr, 0, DataType::kInt16, RedOp::kSum, stream_).ok());
  WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
  EXPECT_TRUE(comm_->async_error().ok()) << comm_->async_error();
}

// NCCL has no tags: a tag other than 0, and a receive from any source, are
// refused naming NCCL before anything is enqueued (torch's own NCCL backend
// would drop the tag), and tag 0 is ncclSend/ncclRecv, here to itself
// inside a group.
TEST_F(Nccl, TagsAndAnySourceAreRefusedNamingNccl) {
  void* buf = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&buf, 128));
  for (const absl::Status& s : {comm_->SendTagged(buf, 16, DataType::kFloat32, 0, 3, stream_),
                                comm_->RecvTagged(buf, 16, DataType::kFloat32, 0, 3, stream_)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    EXPECT_NE(std::string(s.message()).find("NCCL"), std::string::npos) << s;
    EXPECT_NE(std::string(s.message()).find("tag = 3"), std::string::npos) << s;
  }
  int source = 5;
  const absl::Status any = comm_->RecvAnySource(buf, 16, DataType::kFloat32, 0, &source, stream_);
  EXPECT_EQ(any.code(), absl::StatusCode::kUnimplemented) << any;
  EXPECT_NE(std::string(any.message()).find("NCCL"), std::string::npos) << any;
  EXPECT_EQ(source, 5);
  ASSERT_TRUE(Communicator::GroupStart().ok());
  EXPECT_TRUE(comm_->SendTagged(buf, 16, DataType::kFloat32, 0, 0, stream_).ok());
  EXPECT_TRUE(comm_->RecvTagged(static_cast<char*>(buf) + 64, 16, DataType::kFloat32, 0, 0, stream_).ok());
  EXPECT_TRUE(Communicator::GroupEnd().ok());
  WEFT_CUDA_OK(cudaStreamSynchronize(stream_));
  EXPECT_TRUE(comm_->async_error().ok()) << comm_->async_error();
  (void)cudaFree(buf);
}

TEST_F(Nccl, AbortedCommunicatorRefusesWork) {
  comm_->Abort();
  void* buf = nullptr;
  WEFT_CUDA_OK(cudaMalloc(&buf, 64));
  const absl::Status s = comm_->AllReduce(buf, buf, 16, DataType::kFloat32, RedOp::kSum, stream_);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  (void)cudaFree(buf);
}

}  // namespace
}  // namespace weft
