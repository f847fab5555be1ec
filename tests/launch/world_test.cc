// The conformance suite (tests/common/world_suite.cc) on worlds that no MPI
// launcher made: one process per rank, started by tests/launch/launch.py,
// which sets the variables of the launcher it plays. WEFT_TEST_WORLD says
// how each test's world is made:
//   env    weftCommInitWorld's rendezvous (torchrun, Slurm or WEFT_RANK
//          variables, whichever the launcher set)
//   uid    rank 0's unique id, moved through a file (the application's channel)
//   store  weftCommInitStore's path, over a store of files in a directory
// WEFT_TEST_NP is the size the launcher started, which every world must have.
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include "comm/bootstrap/launch.h"
#include "comm/bootstrap/wire.h"
#include "comm/registry.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "tests/common/file_store.h"
#include "tests/common/world_suite.h"

namespace weft {
namespace testing {
namespace {

std::string Env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

int Rank() { return std::atoi(Env("WEFT_TEST_RANK", "0").c_str()); }
int Np() { return std::atoi(Env("WEFT_TEST_NP", "1").c_str()); }

// Every rank makes its worlds in the same order; the n-th one's keys differ.
std::atomic<int> g_worlds{0};

absl::StatusOr<std::unique_ptr<Communicator>> Make(const CommOptions& options) {
  const std::string mode = Env("WEFT_TEST_WORLD", "env");
  const int n = g_worlds.fetch_add(1);
  if (mode == "env") return InitWorld(Backend::kAuto, options);
  const KeyValueStore files = FileStore(Env("WEFT_TEST_DIR", "/tmp"));
  if (mode == "store") return InitStore(Backend::kAuto, Np(), Rank(), files, "world" + std::to_string(n), options);
  if (mode == "uid") {
    // The application's own channel: rank 0 writes the id's bytes to a
    // file, the others read them.
    const std::string key = "uid" + std::to_string(n);
    unsigned char bytes[bootstrap::kUniqueIdBytes];
    bootstrap::UniqueId id;
    if (Rank() == 0) {
      ASSIGN_OR_RETURN(id, MakeUniqueId());
      bootstrap::EncodeUniqueId(id, bytes);
      RETURN_IF_ERROR(files.set(key, std::string(reinterpret_cast<char*>(bytes), sizeof(bytes))));
    } else {
      ASSIGN_OR_RETURN(const std::string v, files.get(key, 60000));
      if (v.size() != sizeof(bytes)) return InternalError("%s has %d bytes", key, v.size());
      std::memcpy(bytes, v.data(), sizeof(bytes));
      ASSIGN_OR_RETURN(id, bootstrap::DecodeUniqueId(bytes));
    }
    return InitRank(Backend::kAuto, Np(), id, Rank(), options);
  }
  return InvalidArgument("WEFT_TEST_WORLD=%s (expected env, uid or store)", mode);
}

}  // namespace

Backend TestBackend() { return Backend::kUcx; }

std::unique_ptr<Communicator> TestWorld(const CommOptions& options) {
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Make(options);
  EXPECT_TRUE(comm.ok()) << comm.status();
  if (!comm.ok()) return nullptr;
  // A world that silently came out smaller than the launch would pass
  // every collective check: its size is the first thing checked.
  EXPECT_EQ((*comm)->size(), Np());
  EXPECT_EQ((*comm)->rank(), Rank());
  return (*comm)->size() == Np() ? std::move(*comm) : nullptr;
}

namespace {

TEST(Launch, WorldSpansTheLaunchAndSplitsWithoutMpi) {
  auto comm = TestWorld({});
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->backend(), Backend::kUcx);
  absl::StatusOr<std::unique_ptr<Communicator>> half = comm->Split(comm->rank() % 2, comm->rank());
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ((*half)->size(), (Np() + 1 - comm->rank() % 2) / 2);
  float x = static_cast<float>(comm->rank());
  ASSERT_TRUE((*half)->AllReduce(&x, &x, 1, DataType::kFloat32, RedOp::kSum, nullptr).ok());
  float want = 0;
  for (int q = comm->rank() % 2; q < Np(); q += 2) want += static_cast<float>(q);
  EXPECT_EQ(x, want);
}

}  // namespace
}  // namespace testing
}  // namespace weft
