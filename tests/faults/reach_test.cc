// Unreachable hosts (comm/p2p/reach.h) without a cluster: a listener whose
// accept queue is full drops every SYN, as a host that is down or cut off
// does, so a connection to it times out with no reset. The silence tracker
// on its own, then TCP boards of this process whose contacts the test
// rewrites to stand for other nodes: one silent, one whose ranks are gone.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap/net.h"
#include "comm/p2p/hang.h"
#include "comm/p2p/reach.h"
#include "comm/p2p/status_channel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace p2p {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

Handshake Of(Handshake::Kind k, int err = 0) { return Handshake{k, err}; }

TEST(Silence, CountsOnlyAnUnbrokenRunOfSilentRounds) {
  Silence s(3);
  const Clock::time_point t0 = Clock::now();
  s.Record(t0, {Of(Handshake::kSkipped), Of(Handshake::kSilent, ETIMEDOUT), Of(Handshake::kAccepted)});
  EXPECT_EQ(s.Silent(1, t0), Clock::duration::zero());  // silent since now
  EXPECT_EQ(s.FirstErr(1), ETIMEDOUT);
  s.Record(t0 + 500ms, {Of(Handshake::kSkipped), Of(Handshake::kNoRoute, ENETUNREACH), Of(Handshake::kAccepted)});
  EXPECT_EQ(s.Silent(1, t0 + 900ms), 900ms);
  EXPECT_EQ(s.FirstErr(1), ETIMEDOUT);  // the run's first error is kept
  EXPECT_EQ(s.Silent(2, t0 + 900ms), Clock::duration::zero());
  // One answer ends the run.
  s.Record(t0 + 1s, {Of(Handshake::kSkipped), Of(Handshake::kAccepted), Of(Handshake::kAccepted)});
  EXPECT_EQ(s.Silent(1, t0 + 2s), Clock::duration::zero());
  // A refusal is a death, not silence; a local failure says nothing.
  s.Record(t0 + 1500ms, {Of(Handshake::kFailed, EMFILE), Of(Handshake::kRefused, ECONNREFUSED),
                         Of(Handshake::kSilent, EHOSTUNREACH)});
  EXPECT_EQ(s.Silent(0, t0 + 2s), Clock::duration::zero());
  EXPECT_EQ(s.Silent(1, t0 + 2s), Clock::duration::zero());
  EXPECT_EQ(s.Silent(2, t0 + 2s), 500ms);
  // Rounds further apart than kMaxGap (an earlier stall) start over.
  s.Record(t0 + 1500ms + Silence::kMaxGap + 1ms, {Of(Handshake::kSkipped), Of(Handshake::kSkipped),
                                                  Of(Handshake::kSilent, ETIMEDOUT)});
  EXPECT_EQ(s.Silent(2, t0 + 1500ms + Silence::kMaxGap + 1ms), Clock::duration::zero());
}

// A TCP listener on `like`'s address whose accept queue is full: the kernel
// drops every further SYN, so connections to it time out.
struct Blackhole {
  bootstrap::Fd listener;
  std::vector<bootstrap::Fd> fillers;
  bootstrap::Endpoint at;

  explicit Blackhole(const bootstrap::Endpoint& like) {
    at = like;
    if (at.addr.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&at.addr)->sin_port = 0;
    if (at.addr.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&at.addr)->sin6_port = 0;
    listener = bootstrap::Fd(socket(at.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
    socklen_t len = at.len;
    if (bind(listener.get(), reinterpret_cast<sockaddr*>(&at.addr), at.len) != 0 ||
        getsockname(listener.get(), reinterpret_cast<sockaddr*>(&at.addr), &len) != 0 || listen(listener.get(), 0)) {
      at.len = 0;
      return;
    }
    // Backlog 0 still queues one; a few more make sure the queue is full.
    for (int i = 0; i < 4; ++i) {
      bootstrap::Fd fd(socket(at.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      static_cast<void>(connect(fd.get(), reinterpret_cast<const sockaddr*>(&at.addr), at.len));
      fillers.push_back(std::move(fd));
    }
    std::this_thread::sleep_for(100ms);
  }
};

TEST(ConnectAll, TellsAcceptedRefusedAndSilentApartInOneWait) {
  absl::StatusOr<bootstrap::Endpoint> here = bootstrap::ChooseListenAddress();
  ASSERT_TRUE(here.ok()) << here.status();
  absl::StatusOr<bootstrap::Fd> open = bootstrap::Listen(*here, false);
  ASSERT_TRUE(open.ok()) << open.status();
  absl::StatusOr<bootstrap::Endpoint> open_at = bootstrap::LocalAddress(open->get());
  ASSERT_TRUE(open_at.ok());
  bootstrap::Endpoint closed_at;
  {
    absl::StatusOr<bootstrap::Fd> closed = bootstrap::Listen(*here, false);
    ASSERT_TRUE(closed.ok());
    closed_at = *bootstrap::LocalAddress(closed->get());
  }  // closed: its port refuses
  Blackhole hole(*here);
  ASSERT_NE(hole.at.len, 0u) << "no listener with a full queue here";
  const auto t0 = Clock::now();
  const std::vector<Handshake> h = ConnectAll({*open_at, closed_at, hole.at, hole.at, bootstrap::Endpoint{}}, 300);
  // Two silent peers cost one wait, not two.
  EXPECT_LT(Clock::now() - t0, 550ms);
  ASSERT_EQ(h.size(), 5u);
  EXPECT_EQ(h[0].kind, Handshake::kAccepted);
  EXPECT_EQ(h[1].kind, Handshake::kRefused);
  EXPECT_EQ(h[2].kind, Handshake::kSilent);
  EXPECT_EQ(h[2].err, ETIMEDOUT);
  EXPECT_EQ(h[3].kind, Handshake::kSilent);
  EXPECT_EQ(h[4].kind, Handshake::kSkipped);
}

// The wire record of status_channel.cc that the test rewrites: key, pid,
// the address, its length, the node's name.
constexpr size_t kAddrAt = 16, kLenAt = kAddrAt + sizeof(sockaddr_storage), kNodeAt = kLenAt + 8;

// `n` boards of one communicator in this process; `rewrite(q, record)`
// changes rank q's record as rank 0 sees it.
std::vector<std::unique_ptr<Board>> MakeBoards(int n, std::vector<std::unique_ptr<HangWatch>>& watches,
                                               const std::function<void(int, unsigned char*)>& rewrite) {
  std::vector<unsigned char> shared(static_cast<size_t>(n) * 1024);
  std::barrier sync(n);
  std::vector<absl::StatusOr<std::unique_ptr<Board>>> made(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    watches.push_back(std::make_unique<HangWatch>(r, n));
  }
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      made[static_cast<size_t>(r)] = MakeTcpBoard(r, n, &watches[static_cast<size_t>(r)]->published(),
                                                  [&, r](const void* mine, void* all, size_t bytes) {
        std::memcpy(shared.data() + static_cast<size_t>(r) * bytes, mine, bytes);
        sync.arrive_and_wait();
        std::memcpy(all, shared.data(), static_cast<size_t>(n) * bytes);
        sync.arrive_and_wait();
        if (r == 0) {
          for (int q = 1; q < n; ++q) rewrite(q, static_cast<unsigned char*>(all) + static_cast<size_t>(q) * bytes);
        }
        return absl::OkStatus();
      });
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::unique_ptr<Board>> boards;
  for (auto& b : made) {
    EXPECT_TRUE(b.ok()) << b.status();
    boards.push_back(b.ok() ? std::move(*b) : nullptr);
  }
  return boards;
}

void SetNode(unsigned char* record, const char* node) {
  std::memset(record + kNodeAt, 0, 64);
  std::memcpy(record + kNodeAt, node, std::strlen(node));
}

void SetAddress(unsigned char* record, const bootstrap::Endpoint& at) {
  std::memcpy(record + kAddrAt, &at.addr, sizeof(at.addr));
  const uint64_t len = at.len;
  std::memcpy(record + kLenAt, &len, sizeof(len));
}

bool IsLoopback(const bootstrap::Endpoint& e) {
  return e.addr.ss_family == AF_INET &&
         (ntohl(reinterpret_cast<const sockaddr_in*>(&e.addr)->sin_addr.s_addr) >> 24) == 127;
}

std::string SurveyOf(Board& b, int rank, int size, int unreachable_ms, HangWatch& w) {
  const absl::Status s = b.Survey(rank, size, unreachable_ms, [] { return std::string("REPORT"); }, w.Here());
  return s.ok() ? "OK" : std::string(s.message());
}

// Ranks 0 and 1 here; ranks 2 and 3 on "far", whose host drops every SYN.
TEST(TcpBoard, NamesTheNodeWhoseHostStaysSilentWithAllItsRanks) {
  absl::StatusOr<bootstrap::Endpoint> here = bootstrap::ChooseListenAddress();
  ASSERT_TRUE(here.ok()) << here.status();
  if (IsLoopback(*here)) GTEST_SKIP() << "only a loopback address here: another node's contact cannot use it";
  Blackhole hole(*here);
  ASSERT_NE(hole.at.len, 0u);
  std::vector<std::unique_ptr<HangWatch>> w;
  std::vector<std::unique_ptr<Board>> b = MakeBoards(4, w, [&](int q, unsigned char* record) {
    if (q < 2) return;
    SetNode(record, "far");
    SetAddress(record, hole.at);
  });
  ASSERT_NE(b[0], nullptr);
  w[0]->Enter(MakeCall(CallKind::kAllReduce, DataType::kFloat32, 5, RedOp::kSum));
  // Silent, but not yet for the window (rank 1, on this host, answers);
  // then probed on until the window has passed, and named only then.
  const auto t0 = Clock::now();
  EXPECT_EQ(SurveyOf(*b[0], 0, 4, 1500, *w[0]), "OK");
  std::string lost = "OK";
  while (lost == "OK" && Clock::now() - t0 < 6s) {
    std::this_thread::sleep_for(250ms);
    lost = SurveyOf(*b[0], 0, 4, 1500, *w[0]);
  }
  EXPECT_GE(Clock::now() - t0, 1500ms);
  EXPECT_THAT(lost, HasSubstr("rank 0: node far (ranks 2, 3) is unreachable: no TCP handshake with its host for"));
  EXPECT_THAT(lost, HasSubstr("Connection timed out"));
  EXPECT_THAT(lost, HasSubstr("this collective cannot complete (rank 0 of 4 is in call #1 all_reduce(count 5"));
  EXPECT_THAT(lost, Not(HasSubstr("lost its own link")));
  // 0: unreachable hosts are never reported (the timeout finds them).
  EXPECT_EQ(SurveyOf(*b[0], 0, 4, 0, *w[0]), "OK");
}

// A board that records its surveys and answers as told.
class ScriptedBoard final : public Board {
 public:
  ScriptedBoard(std::vector<std::string>* log, std::string name, absl::Status answer)
      : log_(log), name_(std::move(name)), answer_(std::move(answer)) {}
  PeerState Peer(int) override { return PeerState{}; }
  bool Dead(int, std::string*) override { return false; }
  std::string Where(int q) const override { return "peer " + std::to_string(q); }
  absl::Status Survey(int rank, int size, int, absl::FunctionRef<std::string()>, const std::string&) override {
    log_->push_back(name_ + " " + std::to_string(rank) + "/" + std::to_string(size));
    return answer_;
  }

 private:
  std::vector<std::string>* log_;
  std::string name_;
  absl::Status answer_;
};

TEST(HangWatch, AHierarchysPartProbesThroughItsWorldFirstInWorldRanks) {
  std::vector<std::string> log;
  HangWatch world(3, 4), part(1, 2);
  world.SetBoard(std::make_unique<ScriptedBoard>(&log, "world", absl::OkStatus()));
  part.SetBoard(std::make_unique<ScriptedBoard>(&log, "part", absl::OkStatus()));
  part.SetWorld(&world);
  EXPECT_TRUE(part.ProbeDead(300).ok());
  EXPECT_THAT(log, ::testing::ElementsAre("world 3/4", "part 1/2"));
  // The world's finding ends the probe, marked as a lost peer.
  log.clear();
  world.SetBoard(std::make_unique<ScriptedBoard>(&log, "world", absl::UnavailableError("node far is unreachable")));
  const absl::Status s = part.ProbeDead(300);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsPeerDead(s));
  EXPECT_THAT(log, ::testing::ElementsAre("world 3/4"));
}

// Ranks 1 and 2 on "gone", whose processes have exited (their ports refuse).
TEST(TcpBoard, NamesEveryRankOfANodeWhoseProcessesAreGone) {
  absl::StatusOr<bootstrap::Endpoint> here = bootstrap::ChooseListenAddress();
  ASSERT_TRUE(here.ok()) << here.status();
  bootstrap::Endpoint closed_at;
  {
    absl::StatusOr<bootstrap::Fd> closed = bootstrap::Listen(*here, false);
    ASSERT_TRUE(closed.ok());
    closed_at = *bootstrap::LocalAddress(closed->get());
  }
  std::vector<std::unique_ptr<HangWatch>> w;
  std::vector<std::unique_ptr<Board>> b = MakeBoards(3, w, [&](int, unsigned char* record) {
    if (!IsLoopback(*here)) SetNode(record, "gone");
    SetAddress(record, closed_at);
  });
  ASSERT_NE(b[0], nullptr);
  const std::string dead = SurveyOf(*b[0], 0, 3, 20000, *w[0]);
  if (IsLoopback(*here)) {
    EXPECT_THAT(dead, HasSubstr("rank 1 ("));
  } else {
    EXPECT_THAT(dead, HasSubstr("rank 0: every process of node gone (ranks 1, 2) is dead (pids "));
  }
  EXPECT_THAT(dead, HasSubstr("this collective cannot complete. REPORT"));
}

}  // namespace
}  // namespace p2p
}  // namespace weft
