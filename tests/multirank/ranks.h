// Runs a test body on N in-process ranks, one thread each.
//
//   RunRanks(4, [&](int rank, Communicator* comm) { ... EXPECT_...; });
//
// A hang cannot block the suite: collectives wait at most `timeout_ms` for
// their peers, and a watchdog aborts every rank's communicator if the body
// has not finished after `limit_s`, so waiting ranks fail with weftAborted.
#ifndef WEFT_TESTS_MULTIRANK_RANKS_H_
#define WEFT_TESTS_MULTIRANK_RANKS_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/inproc/comm.h"

namespace weft {

inline void RunRanks(int n, const std::function<void(int rank, Communicator* comm)>& body, int timeout_ms = 30000,
                     int limit_s = 120) {
  CommOptions options;
  options.timeout_ms = timeout_ms;
  auto comms = inproc::InitInProcess(n, options);
  ASSERT_TRUE(comms.ok()) << comms.status();
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      body(r, (*comms)[r].get());
      std::lock_guard<std::mutex> lock(mu);
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(limit_s), [&] { return finished == n; })) {
      ADD_FAILURE() << "ranks did not finish within " << limit_s << " s: aborting the world";
      for (auto& c : *comms) c->Abort();
    }
  }
  for (auto& t : threads) t.join();
}

}  // namespace weft

#endif  // WEFT_TESTS_MULTIRANK_RANKS_H_
