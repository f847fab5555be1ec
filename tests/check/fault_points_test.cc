// WEFT_FAULT at the entry points beyond the collectives weft-check times:
// send, recv, gather, scatter, all_to_all, a tagged send and a receive from
// any source, and the direct-buffer reductions (all_reduce_pieces,
// all_reduce_ready). Four in-process ranks make these nine calls in this
// order, each rank checking what it got against what the fault in
// WEFT_FAULT (set by meson, one fault per test) must do:
//   flip:R     R's output of each call that writes on R has exactly one
//              wrong element, and nobody else's has any;
//   corrupt:R  the reductions hold R's contribution doubled on every rank;
//              the calls that reduce nothing are exact;
//   delay:R:MS each of R's calls takes at least MS;
//   stop:R:N   R's N-th call fails with a timeout after taking part, the
//              peers' next call fails, and every call before is exact.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "comm/communicator.h"
#include "comm/direct.h"
#include "comm/fault.h"
#include "tests/multirank/harness.h"

namespace weft {
namespace {

constexpr int kRanks = 4;
constexpr size_t kCount = 96;  // elements each rank sends to each peer

float Value(int rank, size_t j) { return static_cast<float>(1 + rank + 8 * (j % 61)); }

// One call of the sequence: issues it on `c` and returns its status; the
// elements it got wrong against `want` (given the rank whose contribution
// counts twice, or -1) go to *wrong.
struct Step {
  const char* name;
  std::function<absl::Status(Communicator& c, int doubled, long long* wrong)> run;
};

long long Compare(const std::vector<float>& got, const std::function<float(size_t)>& want) {
  long long n = 0;
  for (size_t j = 0; j < got.size(); ++j) n += got[j] != want(j);
  return n;
}

float Sum(size_t j, int doubled) {
  float s = 0;
  for (int r = 0; r < kRanks; ++r) s += Value(r, j) * (r == doubled ? 2.0f : 1.0f);
  return s;
}

std::vector<Step> Steps(int gather_root, int scatter_root) {
  std::vector<Step> s;
  s.push_back({"send", [](Communicator& c, int, long long* wrong) {
                 std::vector<float> out(kCount);
                 for (size_t j = 0; j < kCount; ++j) out[j] = Value(c.rank(), j);
                 *wrong = 0;
                 return c.Send(out.data(), kCount, DataType::kFloat32, (c.rank() + 1) % kRanks, nullptr);
               }});
  s.push_back({"recv", [](Communicator& c, int, long long* wrong) {
                 const int from = (c.rank() + kRanks - 1) % kRanks;
                 std::vector<float> in(kCount, -1.0f);
                 const absl::Status st = c.Recv(in.data(), kCount, DataType::kFloat32, from, nullptr);
                 *wrong = Compare(in, [&](size_t j) { return Value(from, j); });
                 return st;
               }});
  s.push_back({"gather", [gather_root](Communicator& c, int, long long* wrong) {
                 std::vector<float> mine(kCount), all(kCount * kRanks, -1.0f);
                 for (size_t j = 0; j < kCount; ++j) mine[j] = Value(c.rank(), j);
                 const absl::Status st = c.Gather(mine.data(), all.data(), kCount, DataType::kFloat32, gather_root,
                                                  nullptr);
                 *wrong = c.rank() != gather_root
                              ? 0
                              : Compare(all, [](size_t j) { return Value(static_cast<int>(j / kCount), j % kCount); });
                 return st;
               }});
  s.push_back({"scatter", [scatter_root](Communicator& c, int, long long* wrong) {
                 std::vector<float> all(kCount * kRanks), mine(kCount, -1.0f);
                 for (size_t j = 0; j < all.size(); ++j) all[j] = Value(static_cast<int>(j / kCount), j);
                 const absl::Status st = c.Scatter(all.data(), mine.data(), kCount, DataType::kFloat32, scatter_root,
                                                   nullptr);
                 *wrong = Compare(mine, [&](size_t j) { return Value(c.rank(), c.rank() * kCount + j); });
                 return st;
               }});
  s.push_back({"all_to_all", [](Communicator& c, int, long long* wrong) {
                 // Block q of rank r's send goes to rank q: r's values at q's offsets.
                 std::vector<float> out(kCount * kRanks), in(kCount * kRanks, -1.0f);
                 for (size_t j = 0; j < out.size(); ++j) out[j] = Value(c.rank(), j);
                 const absl::Status st = c.AllToAll(out.data(), in.data(), kCount, DataType::kFloat32, nullptr);
                 *wrong = Compare(in, [&](size_t j) {
                   return Value(static_cast<int>(j / kCount), c.rank() * kCount + j % kCount);
                 });
                 return st;
               }});
  s.push_back({"send_tagged", [](Communicator& c, int, long long* wrong) {
                 std::vector<float> out(kCount);
                 for (size_t j = 0; j < kCount; ++j) out[j] = Value(c.rank(), j);
                 *wrong = 0;
                 return c.SendTagged(out.data(), kCount, DataType::kFloat32, (c.rank() + 1) % kRanks, 9, nullptr);
               }});
  s.push_back({"recv_any_source", [](Communicator& c, int, long long* wrong) {
                 const int from = (c.rank() + kRanks - 1) % kRanks;  // the one rank that sends it a tag 9
                 std::vector<float> in(kCount, -1.0f);
                 int source = -1;
                 const absl::Status st = c.RecvAnySource(in.data(), kCount, DataType::kFloat32, 9, &source, nullptr);
                 *wrong = Compare(in, [&](size_t j) { return Value(from, j); }) + (st.ok() && source != from);
                 return st;
               }});
  s.push_back({"all_reduce_pieces", [](Communicator& c, int doubled, long long* wrong) {
                 // Three pieces of the logical buffer in three places, in place.
                 const size_t cuts[] = {0, 17, 60, kCount};
                 std::vector<std::vector<float>> mem(3);
                 std::vector<Piece> pieces;
                 for (int p = 0; p < 3; ++p) {
                   for (size_t j = cuts[p]; j < cuts[p + 1]; ++j) mem[p].push_back(Value(c.rank(), j));
                   pieces.push_back({mem[p].data(), mem[p].data(), cuts[p], mem[p].size()});
                 }
                 const absl::Status st =
                     FindDirectReduce(c)->AllReducePieces(pieces, DataType::kFloat32, RedOp::kSum, nullptr);
                 *wrong = 0;
                 for (int p = 0; p < 3; ++p) {
                   *wrong += Compare(mem[p], [&](size_t j) { return Sum(cuts[p] + j, doubled); });
                 }
                 return st;
               }});
  s.push_back({"all_reduce_ready", [](Communicator& c, int doubled, long long* wrong) {
                 std::vector<float> data(kCount);
                 for (size_t j = 0; j < kCount; ++j) data[j] = Value(c.rank(), j);
                 auto buf = std::make_shared<ReadyBuffer>(data.data(), kCount, DataType::kFloat32);
                 buf->SetReady(kCount);
                 const absl::Status st = FindDirectReduce(c)->AllReduceReady(buf, kCount, RedOp::kSum, nullptr);
                 *wrong = Compare(data, [&](size_t j) { return Sum(j, doubled); });
                 return st;
               }});
  return s;
}

TEST(FaultPoints, EveryEntryPointTakesTheFault) {
  const char* env = std::getenv("WEFT_FAULT");
  if (env == nullptr || *env == '\0') GTEST_SKIP() << "WEFT_FAULT is not set (meson sets one fault per test)";
  const absl::StatusOr<fault::Spec> spec = fault::Parse(env);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const fault::Spec f = *spec;
  const int R = f.rank;
  const std::vector<Step> steps = Steps(/*gather_root=*/R, /*scatter_root=*/(R + 1) % kRanks);
  CommOptions options;
  options.timeout_ms = 1000;
  testing::RunRanks(kRanks, [&](Communicator& c) -> std::string {
    const int me = c.rank();
    for (size_t k = 0; k < steps.size(); ++k) {
      const long long call = static_cast<long long>(k) + 1;  // what WEFT_FAULT counts
      long long wrong = 0;
      const auto t0 = std::chrono::steady_clock::now();
      const absl::Status st = steps[k].run(c, f.kind == fault::Kind::kCorrupt ? R : -1, &wrong);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const std::string at = absl::StrFormat("rank %d, call %lld (%s): ", me, call, steps[k].name);
      if (f.kind == fault::Kind::kStop && call >= f.after) {
        if (me == R && call == f.after) {
          if (st.code() != absl::StatusCode::kDeadlineExceeded ||
              st.message().find("stopped taking part") == absl::string_view::npos) {
            return at + "expected the stopped rank's timeout, got " + st.ToString();
          }
          return "";
        }
        if (me != R && call == f.after + 1) return st.ok() ? at + "succeeded without the stopped rank" : "";
      }
      if (!st.ok()) return at + st.ToString();
      // A send writes nothing; a gather only at its root.
      const bool writes_here = std::string(steps[k].name).rfind("send", 0) != 0 && (k != 2 || me == R);
      const long long want = f.kind == fault::Kind::kFlip && me == R && writes_here ? 1 : 0;
      if (wrong != want) return at + absl::StrFormat("%lld wrong elements, want %lld (%s)", wrong, want, f.text);
      if (f.kind == fault::Kind::kDelay && me == R && ms < f.delay_ms) {
        return at + absl::StrFormat("took %.1f ms, under the injected delay of %d ms", ms, f.delay_ms);
      }
    }
    return "";
  }, std::chrono::seconds(60), options);
}

}  // namespace
}  // namespace weft
