// weftStreamAddCallback: a callback runs on the stream's thread after the
// work enqueued before it and before the work enqueued after it, takes the
// stream's pending error (with its message as the thread's last error), and
// refuses bad arguments by name.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "weft/weft.h"

namespace {

std::string LastError() { return weftGetLastError(); }

struct Seen {
  std::thread::id thread;
  weftResult_t status = weftInternalError;
  std::string error;
  std::vector<int32_t> data;  // the buffer as the callback found it
  const std::vector<int32_t>* buf = nullptr;
  std::atomic<int> calls{0};
};

void Record(weftStream_t, weftResult_t status, void* arg) {
  auto* seen = static_cast<Seen*>(arg);
  seen->thread = std::this_thread::get_id();
  seen->status = status;
  seen->error = status == weftSuccess ? "" : LastError();
  if (seen->buf != nullptr) seen->data = *seen->buf;
  seen->calls.fetch_add(1);
}

TEST(StreamCallback, RunsOnTheStreamAfterTheWorkBeforeItAndBeforeTheWorkAfterIt) {
  std::vector<weftComm_t> comms(2);
  ASSERT_EQ(weftCommInitInProcess(comms.data(), 2, nullptr), weftSuccess) << LastError();
  std::vector<Seen> seen(2);
  std::vector<std::vector<int32_t>> bufs(2, std::vector<int32_t>(1000));
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      for (size_t i = 0; i < bufs[r].size(); ++i) bufs[r][i] = static_cast<int32_t>(r * 1000 + i);
      weftStream_t s = nullptr;
      ASSERT_EQ(weftStreamCreate(&s), weftSuccess);
      int32_t* p = bufs[r].data();
      ASSERT_EQ(weftAllReduce(p, p, 1000, weftInt32, weftSum, comms[r], s), weftSuccess) << LastError();
      seen[r].buf = &bufs[r];
      ASSERT_EQ(weftStreamAddCallback(s, Record, &seen[r]), weftSuccess) << LastError();
      // Enqueued after the callback: the callback saw the buffer before this ran.
      ASSERT_EQ(weftAllReduce(p, p, 1000, weftInt32, weftSum, comms[r], s), weftSuccess) << LastError();
      ASSERT_EQ(weftStreamSynchronize(s), weftSuccess) << LastError();
      EXPECT_EQ(seen[r].calls.load(), 1);  // Synchronize returned after the callback did
      EXPECT_EQ(weftStreamDestroy(s), weftSuccess);
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(seen[r].thread, std::thread::id());
    EXPECT_EQ(seen[r].status, weftSuccess);
    ASSERT_EQ(seen[r].data.size(), 1000u);
    for (size_t i = 0; i < 1000; i += 37) {
      EXPECT_EQ(seen[r].data[i], static_cast<int32_t>(1000 + 2 * i)) << "rank " << r << " element " << i;
      EXPECT_EQ(bufs[r][i], static_cast<int32_t>(2 * (1000 + 2 * i))) << "rank " << r << " element " << i;
    }
  }
  for (auto c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

TEST(StreamCallback, RunsOnTheStreamsThreadNotTheCallers) {
  weftStream_t s = nullptr;
  ASSERT_EQ(weftStreamCreate(&s), weftSuccess);
  Seen seen;
  ASSERT_EQ(weftStreamAddCallback(s, Record, &seen), weftSuccess);
  ASSERT_EQ(weftStreamSynchronize(s), weftSuccess);
  EXPECT_EQ(seen.calls.load(), 1);
  EXPECT_NE(seen.thread, std::this_thread::get_id());
  EXPECT_EQ(seen.status, weftSuccess);
  EXPECT_EQ(weftStreamDestroy(s), weftSuccess);
}

// A collective that fails on the stream (its peer never comes; the
// communicator is aborted) reaches the callback with its code and message,
// and the callback took it: the next synchronisation succeeds.
TEST(StreamCallback, TakesThePendingError) {
  std::vector<weftComm_t> comms(2);
  ASSERT_EQ(weftCommInitInProcess(comms.data(), 2, nullptr), weftSuccess) << LastError();
  weftStream_t s = nullptr;
  ASSERT_EQ(weftStreamCreate(&s), weftSuccess);
  float x = 1;
  ASSERT_EQ(weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comms[0], s), weftSuccess) << LastError();
  Seen seen;
  ASSERT_EQ(weftStreamAddCallback(s, Record, &seen), weftSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(seen.calls.load(), 0);  // still waiting for rank 1
  ASSERT_EQ(weftCommAbort(comms[0]), weftSuccess);
  EXPECT_EQ(weftStreamSynchronize(s), weftSuccess) << LastError();
  EXPECT_EQ(seen.calls.load(), 1);
  EXPECT_EQ(seen.status, weftAborted);
  EXPECT_NE(seen.error.find("weftStreamAddCallback"), std::string::npos) << seen.error;
  EXPECT_NE(seen.error.find("abort"), std::string::npos) << seen.error;
  EXPECT_EQ(weftStreamDestroy(s), weftSuccess);
  for (auto c : comms) EXPECT_EQ(weftCommDestroy(c), weftSuccess);
}

TEST(StreamCallback, RefusesBadArguments) {
  Seen seen;
  EXPECT_EQ(weftStreamAddCallback(nullptr, Record, &seen), weftInvalidArgument);
  EXPECT_NE(LastError().find("stream is NULL"), std::string::npos) << LastError();
  int not_a_stream = 0;
  EXPECT_EQ(weftStreamAddCallback(reinterpret_cast<weftStream_t>(&not_a_stream), Record, &seen),
            weftInvalidArgument);
  EXPECT_NE(LastError().find("not a live weft host stream"), std::string::npos) << LastError();
  weftStream_t s = nullptr;
  ASSERT_EQ(weftStreamCreate(&s), weftSuccess);
  EXPECT_EQ(weftStreamAddCallback(s, nullptr, &seen), weftInvalidArgument);
  EXPECT_NE(LastError().find("fn is NULL"), std::string::npos) << LastError();
  EXPECT_EQ(weftStreamDestroy(s), weftSuccess);
  EXPECT_EQ(seen.calls.load(), 0);
}

}  // namespace
