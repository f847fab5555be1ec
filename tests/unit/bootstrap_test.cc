// The bootstrap in one process: ranks as threads joining one socket root,
// the wire format against garbage, the launchers' variables, and every way
// a world can fail to form (each ends with an error on every rank, naming
// what went wrong, and leaves no root thread behind).
#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/launch.h"
#include "comm/bootstrap/net.h"
#include "comm/bootstrap/root.h"
#include "comm/bootstrap/socket.h"
#include "comm/bootstrap/torch_store.h"
#include "comm/bootstrap/wire.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace weft {
namespace bootstrap {
namespace {

// Tests listen and connect on loopback only.
class Loopback : public ::testing::Environment {
 public:
  void SetUp() override { setenv("WEFT_SOCKET_IFNAME", "lo", 1); }
};
const auto* const kLoopback = ::testing::AddGlobalTestEnvironment(new Loopback);

std::string FdList() {
  std::string out;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = d != nullptr ? readdir(d) : nullptr) {
    char target[256] = {};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(path.c_str(), target, sizeof(target) - 1) > 0) out += std::string(e->d_name) + "->" + target + " ";
  }
  if (d != nullptr) closedir(d);
  return out;
}

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (d != nullptr && readdir(d) != nullptr) ++n;
  if (d != nullptr) closedir(d);
  return n;
}

// Every rank of `n` (except those in `skip`) joins `id` on a thread of its
// own and runs `body`; their statuses, by rank.
std::vector<absl::Status> RunRanks(const UniqueId& id, int n, int timeout_ms,
                                   const std::function<absl::Status(Bootstrap&)>& body,
                                   const std::vector<int>& skip = {}, const std::vector<int>& nranks_of = {}) {
  std::vector<absl::Status> out(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    if (std::find(skip.begin(), skip.end(), r) != skip.end()) continue;
    threads.emplace_back([&, r] {
      const int nranks = nranks_of.empty() ? n : nranks_of[static_cast<size_t>(r)];
      absl::StatusOr<std::unique_ptr<Bootstrap>> b = JoinSocketWorld(id, nranks, r, timeout_ms);
      out[static_cast<size_t>(r)] = b.ok() ? body(**b) : b.status();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

absl::Status GatherRanks(Bootstrap& b) {
  const int64_t mine = 1000 + b.rank();
  std::vector<int64_t> all(static_cast<size_t>(b.size()));
  RETURN_IF_ERROR(b.AllGather(&mine, all.data(), sizeof(mine)));
  for (int q = 0; q < b.size(); ++q) {
    if (all[static_cast<size_t>(q)] != 1000 + q) return InternalError("rank %d: block %d wrong", b.rank(), q);
  }
  ASSIGN_OR_RETURN(std::vector<std::string> var, b.AllGatherVar(std::string(static_cast<size_t>(b.rank()) * 3, 'x')));
  for (int q = 0; q < b.size(); ++q) {
    if (var[static_cast<size_t>(q)] != std::string(static_cast<size_t>(q) * 3, 'x')) {
      return InternalError("rank %d: variable block %d wrong", b.rank(), q);
    }
  }
  ASSIGN_OR_RETURN(Locality l, FindLocality(b));
  if (l.num_nodes != 1 || l.local_rank != b.rank() || l.local_size != b.size()) {
    return InternalError("rank %d: locality %d/%d of %d nodes", b.rank(), l.local_rank, l.local_size, l.num_nodes);
  }
  return absl::OkStatus();
}

TEST(Bootstrap, RanksGatherThroughTheRoot) {
  for (int n : {1, 2, 3, 5}) {
    absl::StatusOr<UniqueId> id = MakeUniqueId();
    ASSERT_TRUE(id.ok()) << id.status();
    for (const absl::Status& s : RunRanks(*id, n, 20000, GatherRanks)) EXPECT_TRUE(s.ok()) << s;
  }
}

// A root on IPv6 loopback, as a launch naming "[::1]:port" serves one.
TEST(Bootstrap, RanksGatherOverIpv6) {
  absl::StatusOr<Endpoint> any = Resolve("::1", 1);
  ASSERT_TRUE(any.ok()) << any.status();
  reinterpret_cast<sockaddr_in6&>(any->addr).sin6_port = 0;
  absl::StatusOr<Fd> l = Listen(*any, false);
  if (!l.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << l.status();
  UniqueId id{*LocalAddress(l->get()), RandomTag()};
  ASSERT_TRUE(StartRoot(std::move(*l), id.root, id.tag, 20000).ok());
  EXPECT_EQ(id.root.family(), AF_INET6);
  for (const absl::Status& s : RunRanks(id, 3, 20000, GatherRanks)) EXPECT_TRUE(s.ok()) << s;
}

TEST(Bootstrap, MissingRankTimesOutOnEveryOtherRankNamingIt) {
  const int fds = OpenFds();
  absl::StatusOr<UniqueId> id = MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  const auto t0 = Clock::now();
  std::vector<absl::Status> got = RunRanks(*id, 4, 1500, GatherRanks, /*skip=*/{2});
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  for (int r : {0, 1, 3}) {
    const absl::Status& s = got[static_cast<size_t>(r)];
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_NE(s.message().find("missing rank(s): 2"), std::string::npos) << s;
    EXPECT_NE(s.message().find(id->root.ToString()), std::string::npos) << s;
  }
  EXPECT_EQ(RunningRoots(), 0);
  EXPECT_LE(OpenFds(), fds) << FdList();
}

TEST(Bootstrap, DuplicateRankIsRefusedNamingBothPeers) {
  absl::StatusOr<UniqueId> id = MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  // Four threads, two of which claim rank 1: JoinSocketWorld(r) with r = 0, 1, 1, 3.
  std::vector<absl::Status> out(4);
  std::vector<std::thread> threads;
  const int ranks[] = {0, 1, 1, 3};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto b = JoinSocketWorld(*id, 4, ranks[i], 10000);
      out[static_cast<size_t>(i)] = b.ok() ? GatherRanks(**b) : b.status();
    });
  }
  for (auto& t : threads) t.join();
  int refused = 0;
  for (const absl::Status& s : out) {
    if (absl::IsFailedPrecondition(s) && s.message().find("rank 1 joined twice") != std::string::npos) ++refused;
  }
  // Every rank that had joined when the duplicate came is told; one that
  // came later finds the root gone.
  EXPECT_GE(refused, 2);
  for (const absl::Status& s : out) EXPECT_FALSE(s.ok());
  EXPECT_EQ(RunningRoots(), 0);
}

TEST(Bootstrap, MismatchedNranksIsRefusedNamingBothRanks) {
  absl::StatusOr<UniqueId> id = MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<absl::Status> got = RunRanks(*id, 3, 5000, GatherRanks, {}, /*nranks_of=*/{3, 3, 4});
  int named = 0;
  for (const absl::Status& s : got) {
    EXPECT_FALSE(s.ok());
    if (s.message().find("nranks = ") != std::string::npos) ++named;
  }
  EXPECT_GE(named, 1);
}

TEST(Bootstrap, OutOfRangeRankIsRefusedBeforeConnecting) {
  UniqueId id;
  absl::StatusOr<Endpoint> lo = Resolve("127.0.0.1", 9);
  ASSERT_TRUE(lo.ok());
  id.root = *lo;
  EXPECT_TRUE(absl::IsInvalidArgument(JoinSocketWorld(id, 4, 4, 100).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JoinSocketWorld(id, 4, -1, 100).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(JoinSocketWorld(id, 0, 0, 100).status()));
}

// A rank that connected and said hello, then died (its socket closed with
// no goodbye): every other rank is told which one, at once.
TEST(Bootstrap, RankThatDiesDuringBootstrapFailsTheOthersAtOnce) {
  absl::StatusOr<UniqueId> id = MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::thread dying([&] {
    absl::StatusOr<Fd> fd = ConnectWithRetry(id->root, After(5000));
    ASSERT_TRUE(fd.ok());
    unsigned char hello[kHelloBytes];
    EncodeHello({id->tag, 3, 1, 20000}, hello);
    ASSERT_TRUE(WriteAll(fd->get(), hello, sizeof(hello), After(1000), "hello").ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });  // the Fd closes here
  const auto t0 = Clock::now();
  std::vector<absl::Status> got = RunRanks(*id, 3, 20000, GatherRanks, /*skip=*/{1});
  dying.join();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  for (int r : {0, 2}) {
    EXPECT_TRUE(absl::IsUnavailable(got[static_cast<size_t>(r)])) << got[static_cast<size_t>(r)];
    EXPECT_NE(got[static_cast<size_t>(r)].message().find("rank 1"), std::string::npos);
  }
}

// Garbage, truncated hellos, another job's tag and silent connections on
// the root's port: the root drops them and the world still forms.
TEST(Bootstrap, RootSurvivesGarbageOnItsPort) {
  absl::StatusOr<UniqueId> id = MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<Fd> held;
  std::mt19937 rng(7);
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<Fd> fd = ConnectWithRetry(id->root, After(5000));
    ASSERT_TRUE(fd.ok()) << fd.status();
    std::string junk(static_cast<size_t>(rng() % 100), '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (i % 4 == 1) {  // a well-formed hello of another job
      unsigned char hello[kHelloBytes];
      EncodeHello({id->tag ^ 1, 2, 0, 1000}, hello);
      junk.assign(reinterpret_cast<char*>(hello), sizeof(hello));
    } else if (i % 4 == 2) {  // a truncated hello of this job
      unsigned char hello[kHelloBytes];
      EncodeHello({id->tag, 2, 0, 1000}, hello);
      junk.assign(reinterpret_cast<char*>(hello), 10);
    }
    (void)WriteAll(fd->get(), junk.data(), junk.size(), After(1000), "junk");
    if (i % 2 == 0) held.push_back(std::move(*fd));  // others close at once
  }
  for (const absl::Status& s : RunRanks(*id, 2, 20000, GatherRanks)) EXPECT_TRUE(s.ok()) << s;
}

// A rank whose init fails after joining leaves (says goodbye early): the
// ranks waiting for it are told so instead of waiting for the timeout.
TEST(Bootstrap, RankLeavingEarlyFailsTheWaitingRanks) {
  absl::StatusOr<UniqueId> id = MakeUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<absl::Status> got = RunRanks(*id, 3, 20000, [](Bootstrap& b) -> absl::Status {
    RETURN_IF_ERROR(GatherRanks(b));
    if (b.rank() == 2) return InternalError("rank 2 gives up");  // its bootstrap goes
    return GatherRanks(b);
  });
  EXPECT_TRUE(absl::IsInternal(got[2]));
  for (int r : {0, 1}) {
    EXPECT_TRUE(absl::IsUnavailable(got[static_cast<size_t>(r)])) << got[static_cast<size_t>(r)];
    EXPECT_NE(got[static_cast<size_t>(r)].message().find("rank 2 left"), std::string::npos) << got[static_cast<size_t>(r)];
  }
}

TEST(Bootstrap, UnreachableRootIsATimeoutNamingIt) {
  absl::StatusOr<Endpoint> lo = Resolve("127.0.0.1", 1);  // nothing listens on port 1
  ASSERT_TRUE(lo.ok());
  UniqueId id{*lo, 42};
  const absl::Status s = JoinSocketWorld(id, 2, 1, 500).status();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s;
}

// What answers at a torch store's address but is none: named, within the
// deadline (the store's own protocol runs against torch's servers in
// tests/bench/torch_store.py).
TEST(TorchStore, WhatIsNoStoreIsNamed) {
  absl::StatusOr<Endpoint> any = Resolve("127.0.0.1", 1);
  ASSERT_TRUE(any.ok());
  reinterpret_cast<sockaddr_in&>(any->addr).sin_port = 0;
  absl::StatusOr<Fd> listener = Listen(*any, false);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int port = LocalAddress(listener->get())->port();
  std::atomic<bool> stop{false};
  std::thread closer([&] {  // accepts and hangs up, as a server of another protocol might
    while (!stop.load()) {
      const int fd = accept(listener->get(), nullptr, nullptr);
      if (fd >= 0) close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const auto start = Clock::now();
  absl::Status s = TorchStore::Connect("127.0.0.1", port, After(3000)).status();
  stop = true;
  closer.join();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(port)), std::string::npos) << s;
  EXPECT_NE(s.message().find("WEFT_MASTER_PORT"), std::string::npos) << s;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));

  s = TorchStore::Connect("127.0.0.1", 1, After(300)).status();  // nothing listens on port 1
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s;
}

TEST(Wire, UniqueIdRoundTripsAndGarbageIsRefused) {
  absl::StatusOr<Endpoint> v4 = Resolve("127.0.0.1", 29500);
  absl::StatusOr<Endpoint> v6 = Resolve("[::1]", 29501);
  ASSERT_TRUE(v4.ok() && v6.ok());
  for (const Endpoint& e : {*v4, *v6}) {
    unsigned char bytes[kUniqueIdBytes];
    EncodeUniqueId({e, 0x1234567890abcdefull}, bytes);
    absl::StatusOr<UniqueId> back = DecodeUniqueId(bytes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->root.ToString(), e.ToString());
    EXPECT_EQ(back->tag, 0x1234567890abcdefull);
  }
  unsigned char zeros[kUniqueIdBytes] = {};
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeUniqueId(zeros).status()));
  std::mt19937 rng(3);
  for (int i = 0; i < 1000; ++i) {
    unsigned char junk[kUniqueIdBytes];
    for (unsigned char& c : junk) c = static_cast<unsigned char>(rng());
    if (i % 2) std::memcpy(junk, "WFTU", 4);
    (void)DecodeUniqueId(junk);  // must not crash; success is possible for valid-looking bytes
    unsigned char frame[kFrameHeaderBytes];
    std::memcpy(frame, junk, sizeof(frame));
    absl::StatusOr<FrameHeader> h = DecodeFrameHeader(frame);
    if (h.ok()) {
      EXPECT_LE(h->length, kMaxFrameBytes);
    }
  }
  EXPECT_TRUE(DecodeError("").code() == absl::StatusCode::kUnknown);
  EXPECT_TRUE(absl::IsDeadlineExceeded(DecodeError(EncodeError(absl::DeadlineExceededError("late")))));
}

TEST(Net, IfnameRulesAreNccls) {
  EXPECT_TRUE(MatchesIfname("", "eth0"));
  EXPECT_TRUE(MatchesIfname("eth", "eth0"));
  EXPECT_FALSE(MatchesIfname("eth", "ib0"));
  EXPECT_TRUE(MatchesIfname("eth,ib", "ib0"));
  EXPECT_FALSE(MatchesIfname("^docker", "docker0"));
  EXPECT_TRUE(MatchesIfname("^docker", "eth0"));
  EXPECT_TRUE(MatchesIfname("=eth0", "eth0"));
  EXPECT_FALSE(MatchesIfname("=eth0", "eth01"));
  EXPECT_FALSE(MatchesIfname("^=eth0", "eth0"));
  EXPECT_TRUE(MatchesIfname("^=eth0", "eth01"));
}

TEST(Launch, FirstHostOfSlurmNodelists) {
  EXPECT_EQ(*FirstHost("node01"), "node01");
  EXPECT_EQ(*FirstHost("gpu[01-04,07],cpu3"), "gpu01");
  EXPECT_EQ(*FirstHost("a[3,5]b"), "a3b");
  EXPECT_EQ(*FirstHost("x1,x2"), "x1");
  EXPECT_FALSE(FirstHost("gpu[01").ok());
  EXPECT_FALSE(FirstHost("").ok());
}

using Vars = std::vector<std::pair<const char*, const char*>>;

// Sets the given variables (clearing every launcher's first) for one scope.
class ScopedEnv {
 public:
  explicit ScopedEnv(const Vars& vars) {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS",
                          "MV2_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
                          "SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID", "SLURM_STEP_ID", "RANK",
                          "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "WEFT_RANK", "WEFT_WORLD_SIZE", "WEFT_ROOT",
                          "WEFT_MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE"}) {
      if (const char* x = std::getenv(v)) saved_.emplace_back(v, x);
      unsetenv(v);
    }
    for (auto& [k, v] : vars) setenv(k, v, 1);
    set_ = vars;
  }
  ~ScopedEnv() {
    for (auto& [k, v] : set_) unsetenv(k);
    for (auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
  std::vector<std::pair<const char*, const char*>> set_;
};

TEST(Launch, EachLaunchersVariables) {
  {
    ScopedEnv e(Vars{});
    absl::StatusOr<Launch> l = FindLaunch(true);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->kind, LaunchKind::kNone);
  }
  {
    ScopedEnv e(Vars{{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
    absl::StatusOr<Launch> l = FindLaunch(true);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->kind, LaunchKind::kTorchrun);
    EXPECT_EQ(l->rank, 2);
    EXPECT_EQ(l->size, 4);
    EXPECT_EQ(l->root_port, 29501);  // never torch's own store port
    EXPECT_EQ(l->torch_store_port, 0);
  }
  {
    // torchrun's workers: the agent's store is at MASTER_PORT, weft meets there.
    ScopedEnv e(Vars{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "41234"},
                 {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
    absl::StatusOr<Launch> l = FindLaunch(true);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->torch_store_port, 41234);
    EXPECT_EQ(l->root_port, 0);
    EXPECT_NE(l->why.find("agent store"), std::string::npos) << l->why;
    setenv("WEFT_MASTER_PORT", "31000", 1);  // weft's own port wins
    EXPECT_EQ(FindLaunch(true)->root_port, 31000);
    EXPECT_EQ(FindLaunch(true)->torch_store_port, 0);
    unsetenv("WEFT_MASTER_PORT");
    setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);  // no shared store: the port above
    EXPECT_EQ(FindLaunch(true)->root_port, 41235);
    EXPECT_EQ(FindLaunch(true)->torch_store_port, 0);
  }
  {
    ScopedEnv e(Vars{{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"},
                 {"WEFT_MASTER_PORT", "31000"}});
    EXPECT_EQ(FindLaunch(true)->root_port, 31000);
  }
  {
    ScopedEnv e(Vars{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
    const absl::Status s = FindLaunch(true).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s));
    EXPECT_NE(s.message().find("RANK=4"), std::string::npos) << s;
  }
  {
    ScopedEnv e(Vars{{"RANK", "0"}, {"WORLD_SIZE", "4"}});
    const absl::Status s = FindLaunch(true).status();
    EXPECT_NE(s.message().find("MASTER_ADDR"), std::string::npos) << s;
  }
  {
    ScopedEnv e(Vars{{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "3"}, {"SLURM_STEP_NODELIST", "n[07-09]"},
                 {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "0"}});
    absl::StatusOr<Launch> l = FindLaunch(false);  // without MPI: Slurm's own variables
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->kind, LaunchKind::kSlurm);
    EXPECT_EQ(l->root_host, "n07");
    EXPECT_EQ(l->size, 3);
    EXPECT_EQ(FindLaunch(true)->kind, LaunchKind::kSlurm);  // with MPI too: no PMI, no MPI world
    setenv("PMIX_RANK", "1", 1);  // srun --mpi=pmix: MPI can wire itself up
    EXPECT_EQ(FindLaunch(true)->kind, LaunchKind::kMpi);
    unsetenv("PMIX_RANK");
  }
  {
    ScopedEnv e(Vars{{"OMPI_COMM_WORLD_SIZE", "4"}});
    const absl::Status s = FindLaunch(false).status();
    EXPECT_TRUE(absl::IsUnimplemented(s));
    EXPECT_NE(s.message().find("built without MPI"), std::string::npos) << s;
  }
  {
    ScopedEnv e(Vars{{"WEFT_RANK", "1"}, {"WEFT_WORLD_SIZE", "2"}, {"WEFT_ROOT", "[::1]:4000"}});
    absl::StatusOr<Launch> l = FindLaunch(true);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->kind, LaunchKind::kWeft);
    EXPECT_EQ(l->root_host, "[::1]");
    EXPECT_EQ(l->root_port, 4000);
  }
  {
    ScopedEnv e(Vars{{"WEFT_RANK", "1"}, {"WEFT_WORLD_SIZE", "2"}, {"WEFT_ROOT", "localhost"}});
    EXPECT_TRUE(absl::IsInvalidArgument(FindLaunch(true).status()));
  }
}

// Two threads as the two ranks of a weft-variables launch: rank 0 serves
// the root on the named port, twice in a row (worlds count in the tag).
TEST(Launch, LaunchedWorldsFormOneAfterAnother) {
  // A free port: bind an ephemeral one, note it, let it go.
  absl::StatusOr<Endpoint> any = Resolve("127.0.0.1", 1);
  ASSERT_TRUE(any.ok());
  reinterpret_cast<sockaddr_in&>(any->addr).sin_port = 0;
  int port = 0;
  {
    absl::StatusOr<Fd> l = Listen(*any, true);
    ASSERT_TRUE(l.ok());
    port = LocalAddress(l->get())->port();
  }
  for (int world = 0; world < 2; ++world) {
    std::vector<absl::Status> out(2);
    std::vector<std::thread> threads;
    // Separate counters per thread are not possible (one process): take the
    // Launch by hand, as FindLaunch would give each rank.
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        Launch l;
        l.kind = LaunchKind::kWeft;
        l.rank = r;
        l.size = 2;
        l.root_host = "127.0.0.1";
        l.root_port = port;
        // Both threads share the process's world counter: make the tag
        // agree by joining through one id instead.
        UniqueId id{*Resolve(l.root_host, l.root_port), 0xabc0u + static_cast<uint64_t>(world)};
        if (r == 0) {
          absl::Status s = ServeRoot(id.root, id.tag);
          if (!s.ok()) {
            out[0] = s;
            return;
          }
        }
        auto b = JoinSocketWorld(id, 2, r, 10000);
        out[static_cast<size_t>(r)] = b.ok() ? GatherRanks(**b) : b.status();
      });
    }
    for (auto& t : threads) t.join();
    for (const absl::Status& s : out) EXPECT_TRUE(s.ok()) << "world " << world << ": " << s;
  }
}

}  // namespace
}  // namespace bootstrap
}  // namespace weft
