// The hang watch (comm/p2p/hang.h) without a world: its report from known
// peer states, the dead-peer probe, the warning threshold, a wait that times
// out with the report, and the TCP status channel between two boards of this
// process (the one a job spread over nodes uses).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <barrier>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/p2p/backoff.h"
#include "comm/p2p/hang.h"
#include "comm/p2p/status_channel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace p2p {
namespace {

using ::testing::HasSubstr;

// Peer states set by the test.
class FixedBoard final : public Board {
 public:
  explicit FixedBoard(std::vector<PeerState> peers) : peers_(std::move(peers)) {}
  PeerState Peer(int q) override { return peers_[static_cast<size_t>(q)]; }
  bool Dead(int q, std::string* why) override {
    if (peers_[static_cast<size_t>(q)].kind != PeerState::kDead) return false;
    *why = peers_[static_cast<size_t>(q)].why;
    return true;
  }
  std::string Where(int q) const override { return peers_[static_cast<size_t>(q)].where; }

 private:
  std::vector<PeerState> peers_;
};

Call AllReduceOf(size_t count) { return MakeCall(CallKind::kAllReduce, DataType::kFloat32, count, RedOp::kSum); }

// A peer that has entered `entered` calls of all_reduce(count) and completed `done`.
PeerState At(int q, uint64_t entered, uint64_t done, size_t count = 1000) {
  HangWatch w(q, 4);
  for (uint64_t i = 0; i < entered; ++i) {
    w.Enter(AllReduceOf(count));
    if (i < done) w.Done();
  }
  PeerState p;
  p.kind = PeerState::kKnown;
  p.progress = ReadProgress(w.published());
  p.where = "pid " + std::to_string(100 + q) + " on node n" + std::to_string(q);
  return p;
}

TEST(HangWatch, ReportNamesTheRanksNotArrivedAndTheirLastCalls) {
  HangWatch w(0, 4);
  for (int i = 0; i < 4; ++i) {
    w.Enter(AllReduceOf(1000));
    if (i < 3) w.Done();
  }
  PeerState dead;
  dead.kind = PeerState::kDead;
  dead.where = "pid 103 on node n3";
  dead.why = "its process has exited";
  w.SetBoard(std::make_unique<FixedBoard>(std::vector<PeerState>{At(0, 4, 3), At(1, 4, 3), At(2, 3, 3), dead}));
  const std::string r = w.Report(61000);
  EXPECT_THAT(r, HasSubstr("rank 0 of 4 has waited 61000 ms in call #4 all_reduce(count 1000, float32, sum)"));
  EXPECT_THAT(r, HasSubstr("not arrived: rank(s) {2, 3}"));
  EXPECT_THAT(r, HasSubstr("rank 1 (pid 101 on node n1): in this call, last completed #3 all_reduce"));
  EXPECT_THAT(r, HasSubstr("rank 2 (pid 102 on node n2): not arrived, last completed #3 all_reduce"));
  EXPECT_THAT(r, HasSubstr("rank 3 (pid 103 on node n3): dead, its process has exited"));
  const absl::Status s = w.ProbeDead(61000);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 3 (pid 103 on node n3) is dead"));
  EXPECT_TRUE(IsPeerDead(s));
}

TEST(HangWatch, EveryPeerArrivedAndNoBoard) {
  HangWatch w(1, 2);
  w.Enter(AllReduceOf(8));
  EXPECT_THAT(w.Report(5), HasSubstr("the peers' progress is unknown"));
  EXPECT_TRUE(w.ProbeDead(5).ok());
  w.SetBoard(std::make_unique<FixedBoard>(std::vector<PeerState>{At(0, 1, 0, 8), At(1, 1, 0, 8)}));
  EXPECT_THAT(w.Report(5), HasSubstr("every peer has reached this call"));
  EXPECT_THAT(w.Report(-1), HasSubstr("rank 1 of 2 is in call #1 all_reduce(count 8"));
  PeerState silent;
  silent.where = "pid 7 on node n0";
  silent.why = "Network is unreachable";
  w.SetBoard(std::make_unique<FixedBoard>(std::vector<PeerState>{silent, At(1, 1, 0, 8)}));
  EXPECT_THAT(w.Report(5), HasSubstr("no answer from rank(s) {0}"));
  EXPECT_THAT(w.Report(5), ::testing::Not(HasSubstr("every peer")));
}

TEST(HangWatch, WarnsOnlyBelowTheTimeout) {
  // WEFT_HANG_WARN_MS's default (60 s).
  EXPECT_EQ(HangWarnMs(600000), 60000);
  EXPECT_EQ(HangWarnMs(60000), 0);
  EXPECT_EQ(HangWarnMs(1000), 0);
}

TEST(HangWatch, ATimedOutWaitCarriesTheReport) {
  HangWatch w(0, 2);
  w.Enter(AllReduceOf(4));
  w.SetBoard(std::make_unique<FixedBoard>(std::vector<PeerState>{At(0, 1, 0, 4), At(1, 0, 0, 4)}));
  Backoff b(Patience{0, 300, nullptr, std::chrono::microseconds(0), &w});
  absl::Status s;
  while ((s = b.Idle()).ok()) {
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not arrived: rank(s) {1}"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("last completed none"));
}

TEST(HangWatch, ADeadPeerEndsTheWaitBeforeTheTimeout) {
  HangWatch w(0, 2);
  w.Enter(AllReduceOf(4));
  PeerState dead;
  dead.kind = PeerState::kDead;
  dead.where = "pid 9 on node n1";
  dead.why = "gone";
  w.SetBoard(std::make_unique<FixedBoard>(std::vector<PeerState>{At(0, 1, 0, 4), dead}));
  Backoff b(Patience{0, 60000, nullptr, std::chrono::microseconds(0), &w});
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s;
  while ((s = b.Idle()).ok()) {
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(IsPeerDead(s)) << s;
}

// Two ranks of one communicator in this process, over the TCP channel.
TEST(StatusChannel, PeersReadEachOthersProgressAndAClosedPortIsDead) {
  HangWatch w0(0, 2), w1(1, 2);
  std::vector<unsigned char> shared(2 * 1024);
  std::barrier sync(2);
  auto gather = [&](int rank, bool kill_peer) {
    return [&, rank, kill_peer](const void* mine, void* all, size_t bytes) {
      std::memcpy(shared.data() + static_cast<size_t>(rank) * bytes, mine, bytes);
      sync.arrive_and_wait();
      std::memcpy(all, shared.data(), 2 * bytes);
      sync.arrive_and_wait();
      if (kill_peer) {
        // A port nobody listens on any more, as a dead process leaves behind.
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(a);
        bind(fd, reinterpret_cast<sockaddr*>(&a), len);
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
        close(fd);
        // The peer's record: key, pid, then its sockaddr_storage.
        auto* peer = static_cast<unsigned char*>(all) + (1 - rank) * bytes;
        std::memcpy(peer + 16, &a, sizeof(a));
        uint64_t alen = sizeof(a);
        std::memcpy(peer + 16 + sizeof(sockaddr_storage), &alen, sizeof(alen));
      }
      return absl::OkStatus();
    };
  };
  absl::StatusOr<std::unique_ptr<Board>> b1;
  std::thread t([&] { b1 = MakeTcpBoard(1, 2, &w1.published(), gather(1, false)); });
  absl::StatusOr<std::unique_ptr<Board>> b0 = MakeTcpBoard(0, 2, &w0.published(), gather(0, false));
  t.join();
  ASSERT_TRUE(b0.ok()) << b0.status();
  ASSERT_TRUE(b1.ok()) << b1.status();
  w1.Enter(AllReduceOf(7));
  w1.Done();
  w1.Enter(AllReduceOf(9));
  const PeerState p = (*b0)->Peer(1);
  ASSERT_EQ(p.kind, PeerState::kKnown) << p.why;
  EXPECT_EQ(p.progress.entered, 2u);
  EXPECT_EQ(p.progress.done, 1u);
  EXPECT_THAT(p.where, HasSubstr("pid " + std::to_string(getpid())));
  std::string why;
  EXPECT_FALSE((*b0)->Dead(1, &why)) << why;
  b1->reset();  // rank 1 destroys its communicator: still alive, no longer known
  EXPECT_EQ((*b0)->Peer(1).kind, PeerState::kGone);

  // A peer whose listener is gone: dead, at once.
  absl::StatusOr<std::unique_ptr<Board>> d1;
  std::thread t2([&] { d1 = MakeTcpBoard(1, 2, &w1.published(), gather(1, false)); });
  absl::StatusOr<std::unique_ptr<Board>> d0 = MakeTcpBoard(0, 2, &w0.published(), gather(0, true));
  t2.join();
  ASSERT_TRUE(d0.ok() && d1.ok());
  EXPECT_TRUE((*d0)->Dead(1, &why));
  EXPECT_THAT(why, HasSubstr("refused"));
  EXPECT_EQ((*d0)->Peer(1).kind, PeerState::kDead);
}

}  // namespace
}  // namespace p2p
}  // namespace weft
