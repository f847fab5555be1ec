// A communicator on CUDA memory (NCCL) takes a cudaStream_t: a weft host
// stream (weftStream_t) given to one of its collectives is refused by the
// checked entry point, as the kernels refuse it, instead of reaching NCCL
// as a bogus cudaStream_t. Runs on any machine: the calls move 0 elements
// (no buffer to classify), and the backend fails the test if reached.
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "capi/handles.h"
#include "comm/communicator.h"
#include "comm/direct.h"
#include "core/stream.h"
#include "tests/unit/unreachable_cuda_comm.h"
#include "weft/weft.h"

namespace weft {
namespace {

void ExpectHostStreamRefused(const absl::Status& s, const char* what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
  EXPECT_NE(std::string(s.message()).find("weft host stream"), std::string::npos) << what << ": " << s;
  EXPECT_NE(std::string(s.message()).find("cudaStream_t"), std::string::npos) << what << ": " << s;
}

TEST(CudaComm, CollectivesRefuseAWeftHostStream) {
  UnreachableCudaComm comm(2, "the communicator's stream check");
  HostStream hs;
  ExpectHostStreamRefused(comm.AllReduce(nullptr, nullptr, 0, DataType::kFloat32, RedOp::kSum, &hs), "all_reduce");
  ExpectHostStreamRefused(comm.ReduceScatter(nullptr, nullptr, 0, DataType::kBfloat16, RedOp::kAvg, &hs),
                          "reduce_scatter");
  ExpectHostStreamRefused(comm.AllGather(nullptr, nullptr, 0, DataType::kFloat16, &hs), "all_gather");
  ExpectHostStreamRefused(comm.Broadcast(nullptr, nullptr, 0, DataType::kInt64, 1, &hs), "broadcast");
}

// What every rank has ready is read on the host when the call runs, which
// says nothing of what a CUDA stream has produced, and pieces are reduced
// by the host: a CUDA communicator offers no direct-buffer reductions, so
// the reducer plans plain all-reduces for it.
TEST(CudaComm, OffersNoDirectReductions) {
  UnreachableCudaComm comm(2, "the direct-buffer reductions' lookup");
  EXPECT_EQ(FindDirectReduce(comm), nullptr);
}

// A backend without tags refuses a tag other than 0, and a receive from any
// source, at the entry point, inside a group too (where host calls would be
// held), with Unsupported naming the backend and the tag; nothing reaches
// the backend.
TEST(CudaComm, TagsAreRefusedBeforeTheBackend) {
  UnreachableCudaComm comm(2, "the entry points' tag check");
  float* none = nullptr;
  ASSERT_TRUE(Communicator::GroupStart().ok());
  for (const absl::Status& s : {comm.SendTagged(none, 0, DataType::kFloat32, 1, 3, nullptr),
                                comm.RecvTagged(none, 0, DataType::kFloat32, 1, 3, nullptr)}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    EXPECT_NE(std::string(s.message()).find("tag = 3"), std::string::npos) << s;
    EXPECT_NE(std::string(s.message()).find("backend nccl"), std::string::npos) << s;
    EXPECT_NE(std::string(s.message()).find("NCCL has no tags"), std::string::npos) << s;
  }
  // A receive from any source, whatever its tag; the source is left as it was.
  int source = 7;
  const absl::Status any = comm.RecvAnySource(none, 0, DataType::kFloat32, 0, &source, nullptr);
  EXPECT_EQ(any.code(), absl::StatusCode::kUnimplemented) << any;
  EXPECT_NE(std::string(any.message()).find("any source"), std::string::npos) << any;
  EXPECT_NE(std::string(any.message()).find("NCCL has no tags"), std::string::npos) << any;
  EXPECT_EQ(source, 7);
  EXPECT_TRUE(Communicator::GroupEnd().ok());
  // Tag 0 passes the check (count 0: nothing to issue).
  EXPECT_TRUE(comm.SendTagged(none, 0, DataType::kFloat32, 1, 0, nullptr).ok());
}

TEST(CudaComm, TheCAbiRefusesAWeftHostStream) {
  weftComm_t comm = capi::NewHandle(std::make_unique<UnreachableCudaComm>(2, "weftAllReduce's stream check"));
  weftStream_t stream = nullptr;
  ASSERT_EQ(weftStreamCreate(&stream), weftSuccess);
  EXPECT_EQ(weftAllReduce(nullptr, nullptr, 0, weftFloat32, weftSum, comm, stream), weftInvalidArgument);
  const std::string err = weftGetLastError();
  EXPECT_NE(err.find("weft host stream"), std::string::npos) << err;
  EXPECT_EQ(weftStreamDestroy(stream), weftSuccess);
  EXPECT_EQ(weftCommDestroy(comm), weftSuccess);
}

}  // namespace
}  // namespace weft
