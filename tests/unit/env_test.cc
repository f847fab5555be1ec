// The environment settings: values out of range are warned about and
// ignored, never silently reinterpreted (WEFT_TIMEOUT_MS=0 once meant 600 s).
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "core/env.h"

namespace weft {
namespace {

// Env::Parse() with `name` set to `value`, and what it wrote to stderr.
std::pair<Env, std::string> ParseWith(const char* name, const char* value) {
  const char* old = std::getenv(name);
  const std::string saved = old != nullptr ? old : "";
  setenv(name, value, 1);
  ::testing::internal::CaptureStderr();
  Env e = Env::Parse();
  std::string err = ::testing::internal::GetCapturedStderr();
  if (old != nullptr) setenv(name, saved.c_str(), 1);
  else unsetenv(name);
  return {e, err};
}

TEST(Env, ZeroTimeoutIsRefusedWithAWarning) {
  auto [e, err] = ParseWith("WEFT_TIMEOUT_MS", "0");
  EXPECT_EQ(e.timeout_ms, 600000);
  EXPECT_NE(err.find("ignoring WEFT_TIMEOUT_MS=0"), std::string::npos) << err;
  EXPECT_NE(err.find("using 600000"), std::string::npos) << err;
}

TEST(Env, TimeoutsInRangeAreTakenSilently) {
  auto [e, err] = ParseWith("WEFT_TIMEOUT_MS", "1500");
  EXPECT_EQ(e.timeout_ms, 1500);
  EXPECT_EQ(err, "");
}

TEST(Env, JunkIsRefusedWithAWarning) {
  auto [e, err] = ParseWith("WEFT_TIMEOUT_MS", "30s");
  EXPECT_EQ(e.timeout_ms, 600000);
  EXPECT_NE(err.find("ignoring WEFT_TIMEOUT_MS=30s"), std::string::npos) << err;
}

TEST(Env, WaitPoliciesAreReadByName) {
  EXPECT_EQ(ParseWith("WEFT_WAIT", "").first.wait, WaitPolicy::kDefault);  // unset or empty: the backend's choice
  for (auto [name, want] : {std::pair{"spin", WaitPolicy::kSpin}, std::pair{"YIELD", WaitPolicy::kYield},
                            std::pair{"block", WaitPolicy::kBlock}}) {
    auto [e, err] = ParseWith("WEFT_WAIT", name);
    EXPECT_EQ(e.wait, want) << name;
    EXPECT_EQ(err, "") << name;
  }
}

TEST(Env, UnknownWaitPolicyIsRefusedWithAWarning) {
  auto [e, err] = ParseWith("WEFT_WAIT", "sleep");
  EXPECT_EQ(e.wait, WaitPolicy::kDefault);
  EXPECT_NE(err.find("ignoring WEFT_WAIT=sleep (expected spin, yield or block); using the default"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace weft
