// gtest main for MPI-launched tests (mpiexec -n N test): every rank runs
// every test; rank 0 prints the usual report, other ranks print only their
// failures (prefixed with the rank); the exit code is the worst of all
// ranks (MPI_MAX), so a failure on any rank fails the run. Each test has a
// time limit (WEFT_TEST_LIMIT_S, default 120 s): a test still running then
// is reported and the whole job is aborted, so a hang fails instead of
// blocking CI.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace {

int WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Prints failed assertions of a non-zero rank, which has no printer.
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

// Aborts the job when one test runs longer than the limit.
class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  Watchdog(int rank, std::chrono::seconds limit) : rank_(rank), limit_(limit), thread_([this] { Run(); }) {}
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
        std::fprintf(stderr, "[rank %d] %s ran past its %lld s limit: aborting the job\n", rank_, name_.c_str(),
                     static_cast<long long>(limit_.count()));
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
      }
    }
  }

  const int rank_;
  const std::chrono::seconds limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, armed_ = false;
  std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = WorldRank();
  const char* limit_env = std::getenv("WEFT_TEST_LIMIT_S");
  const int limit = limit_env != nullptr && std::atoi(limit_env) > 0 ? std::atoi(limit_env) : 120;
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  listeners.Append(new Watchdog(rank, std::chrono::seconds(limit)));
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
