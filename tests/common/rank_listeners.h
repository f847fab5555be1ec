// gtest listeners for tests whose ranks are processes (tests/mpi under
// mpiexec, tests/launch under launch.py): rank 0 keeps the usual report,
// other ranks print only their failures, prefixed with the rank; and a test
// still running after WEFT_TEST_LIMIT_S (default 120 s) is reported and the
// process ended by `expire` (MPI_Abort for the whole job, or _Exit), so a
// hang fails instead of blocking CI.
//
//   InstallRankListeners(rank, [] { MPI_Abort(MPI_COMM_WORLD, 3); });
#ifndef WEFT_TESTS_COMMON_RANK_LISTENERS_H_
#define WEFT_TESTS_COMMON_RANK_LISTENERS_H_

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace weft {
namespace testing {

// Prints the failed assertions of a rank that has no printer.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  // The test's name is kept here: gtest calls OnTestPartResult with its own
  // lock held, which UnitTest::current_test_info() takes again (a rank's
  // first failure then hung it instead of printing).
  void OnTestStart(const ::testing::TestInfo& t) override {
    name_ = std::string(t.test_suite_name()) + "." + t.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: %s\n", rank_, name_.empty() ? "?" : name_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
  std::string name_;
};

// Ends the process (through `expire`) when one test runs past the limit.
class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  Watchdog(int rank, std::chrono::seconds limit, void (*expire)())
      : rank_(rank), limit_(limit), expire_(expire), thread_([this] { Run(); }) {}
  ~Watchdog() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void OnTestStart(const ::testing::TestInfo& t) override {
    std::lock_guard<std::mutex> lock(mu_);
    name_ = std::string(t.test_suite_name()) + "." + t.name();
    deadline_ = std::chrono::steady_clock::now() + limit_;
    armed_ = true;
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (armed_ && std::chrono::steady_clock::now() > deadline_) {
        std::fprintf(stderr, "[rank %d] %s ran past its %lld s limit: ending it\n", rank_, name_.c_str(),
                     static_cast<long long>(limit_.count()));
        std::fflush(stderr);
        expire_();
        std::_Exit(3);  // if `expire` returned
      }
    }
  }

  const int rank_;
  const std::chrono::seconds limit_;
  void (*const expire_)();
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

// Call after InitGoogleTest, before RUN_ALL_TESTS.
inline void InstallRankListeners(int rank, void (*expire)()) {
  const char* limit_env = std::getenv("WEFT_TEST_LIMIT_S");
  const int limit = limit_env != nullptr && std::atoi(limit_env) > 0 ? std::atoi(limit_env) : 120;
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  listeners.Append(new Watchdog(rank, std::chrono::seconds(limit), expire));
}

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_RANK_LISTENERS_H_
