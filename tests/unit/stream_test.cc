// core/stream.h: in-order execution, error reporting, registry.
#include "core/stream.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace weft {
namespace {

TEST(HostStream, RunsInEnqueueOrder) {
  HostStream s;
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) {
    s.Enqueue([&order, i] {
      order.push_back(i);
      return absl::OkStatus();
    });
  }
  ASSERT_TRUE(s.Synchronize().ok());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_TRUE(s.Idle());
}

TEST(HostStream, EnqueueDoesNotWait) {
  HostStream s;
  std::atomic<bool> release{false};
  s.Enqueue([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return absl::OkStatus();
  });
  EXPECT_FALSE(s.Idle());  // the task is blocked, yet Enqueue returned
  release = true;
  EXPECT_TRUE(s.Synchronize().ok());
}

TEST(HostStream, WaitForAMarkLeavesLaterWorkRunning) {
  HostStream s;
  std::atomic<bool> release{false};
  std::atomic<int> first{0};
  s.Enqueue([&] {
    first = 1;
    return absl::OkStatus();
  });
  const uint64_t mark = s.Mark();
  s.Enqueue([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return absl::OkStatus();
  });
  s.WaitFor(mark);  // returns although the second task is still blocked
  EXPECT_EQ(first.load(), 1);
  EXPECT_FALSE(s.Idle());
  release = true;
  EXPECT_TRUE(s.Synchronize().ok());
}

TEST(HostStream, ReportsFirstErrorOnceAndKeepsRunning) {
  HostStream s;
  int ran = 0;
  s.Enqueue([] { return absl::InvalidArgumentError("first"); });
  s.Enqueue([] { return absl::InternalError("second"); });
  s.Enqueue([&] { ++ran; return absl::OkStatus(); });
  const absl::Status st = s.Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "first");
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(s.Synchronize().ok());  // cleared
}

TEST(HostStream, ExceptionBecomesInternalError) {
  HostStream s;
  s.Enqueue([]() -> absl::Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(s.Synchronize().code(), absl::StatusCode::kInternal);
}

// The address of a stream that existed and was destroyed (as an integer:
// nothing may dereference it, only the registry may be asked about it).
__attribute__((noinline)) uintptr_t DestroyedStreamAddress() {
  auto s = std::make_unique<HostStream>();
  EXPECT_EQ(HostStream::Find(s.get()), s.get());
  return reinterpret_cast<uintptr_t>(s.get());
}

TEST(HostStream, RegistryKnowsLiveStreamsOnly) {
  int x = 0;
  EXPECT_EQ(HostStream::Find(&x), nullptr);
  EXPECT_EQ(HostStream::Find(nullptr), nullptr);
  EXPECT_EQ(HostStream::Find(reinterpret_cast<const void*>(DestroyedStreamAddress())), nullptr);
}

}  // namespace
}  // namespace weft
