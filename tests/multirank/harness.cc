#include "tests/multirank/harness.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/inproc/comm.h"
#include "gtest/gtest.h"

namespace weft {
namespace testing {

void RunRanks(int nranks, const RankBody& body, std::chrono::seconds limit, CommOptions options) {
  // Sanitized builds run several times slower (tools/sanitize sets it).
  if (const char* scale = std::getenv("WEFT_TEST_LIMIT_SCALE"); scale != nullptr && std::atoi(scale) > 1) {
    limit *= std::atoi(scale);
  }
  auto comms = inproc::InitInProcess(nranks, options);
  ASSERT_TRUE(comms.ok()) << comms.status();
  std::vector<std::string> errors(static_cast<size_t>(nranks));
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      std::string e = body(*(*comms)[static_cast<size_t>(r)]);
      std::lock_guard<std::mutex> lock(mu);
      errors[static_cast<size_t>(r)] = std::move(e);
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, limit, [&] { return done == nranks; })) {
    ADD_FAILURE() << "ranks still running after " << limit.count() << " s (" << done << " of " << nranks
                  << " finished): aborting their communicators";
    for (auto& c : *comms) c->Abort();
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return done == nranks; })) {
      std::fprintf(stderr, "ranks ignored Abort for 10 s: exiting, a hung thread cannot be joined\n");
      std::_Exit(1);
    }
  }
  lock.unlock();
  for (auto& t : threads) t.join();
  for (int r = 0; r < nranks; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << nranks;
  }
}

}  // namespace testing
}  // namespace weft
