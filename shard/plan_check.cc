#include "shard/plan_check.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "shard/staging.h"

namespace weft {
namespace shard {
namespace {

constexpr int kHeaderWords = 2 + kPlanOptionWords;  // ok, n, options

// "ranks 1, 3" / "rank 2".
std::string RankList(const std::vector<int>& ranks) {
  return absl::StrFormat("%s %s", ranks.size() == 1 ? "rank" : "ranks", absl::StrJoin(ranks, ", "));
}

std::string Describe(int64_t count, int64_t kind) {
  return absl::StrFormat("%d x %s (%s memory)", count, Name(static_cast<DataType>(kind & 0xff)),
                         Name(static_cast<MemKind>(kind >> 8)));
}

}  // namespace

absl::Status CheckSamePlanInputs(Communicator& comm, absl::Span<const GradSpec> grads,
                                 absl::Span<const int64_t> option_words, absl::Span<const char* const> option_names,
                                 const absl::Status& local) {
  if (option_words.size() > kPlanOptionWords || option_names.size() != option_words.size()) {
    return InternalError("plan check: %zu option words and %zu names (at most %d)", option_words.size(),
                         option_names.size(), kPlanOptionWords);
  }
  const int P = comm.size();
  const int64_t n = static_cast<int64_t>(grads.size());
  std::vector<int64_t> header(kHeaderWords, 0);
  header[0] = local.ok() ? 1 : 0;
  header[1] = n;
  for (size_t i = 0; i < option_words.size(); ++i) header[2 + i] = option_words[i];
  std::vector<int64_t> all(static_cast<size_t>(P) * kHeaderWords);
  RETURN_IF_ERROR(StagedAllGather(comm, header.data(), all.data(), kHeaderWords, DataType::kInt64));
  auto at = [&](int r, int w) { return all[static_cast<size_t>(r) * kHeaderWords + w]; };

  if (!local.ok()) return local;
  std::vector<int> refused;
  for (int r = 0; r < P; ++r) {
    if (at(r, 0) == 0) refused.push_back(r);
  }
  if (!refused.empty()) {
    return InvalidUsage("%s refused %s arguments (see the error there), so no rank creates it",
                        RankList(refused), refused.size() == 1 ? "its" : "their");
  }
  for (int w = 1; w < kHeaderWords; ++w) {
    if (w >= 2 && static_cast<size_t>(w - 2) >= option_words.size()) break;
    std::vector<int> differ;
    for (int r = 1; r < P; ++r) {
      if (at(r, w) != at(0, w)) differ.push_back(r);
    }
    if (differ.empty()) continue;
    const char* what = w == 1 ? "the number of gradients" : option_names[w - 2];
    return InvalidUsage("ranks disagree on %s: rank 0 has %d, %s %s %d", what, at(0, w), RankList(differ),
                        differ.size() == 1 ? "has" : "have (first)", at(differ[0], w));
  }

  // Per gradient: count, then dtype | memory << 8.
  std::vector<int64_t> mine(2 * grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    mine[2 * i] = static_cast<int64_t>(grads[i].count);
    mine[2 * i + 1] = static_cast<int64_t>(grads[i].dtype) | (static_cast<int64_t>(grads[i].memory) << 8);
  }
  std::vector<int64_t> every(static_cast<size_t>(P) * mine.size());
  RETURN_IF_ERROR(StagedAllGather(comm, mine.data(), every.data(), mine.size(), DataType::kInt64));
  const size_t words = mine.size();
  for (size_t i = 0; i < grads.size(); ++i) {
    std::vector<int> differ;
    for (int r = 1; r < P; ++r) {
      const int64_t* x = &every[r * words + 2 * i];
      if (x[0] != every[2 * i] || x[1] != every[2 * i + 1]) differ.push_back(r);
    }
    if (differ.empty()) continue;
    const int64_t* d = &every[differ[0] * words + 2 * i];
    return InvalidUsage("gradient %s (the first that differs) is %s on rank 0 but %s on %s", GradLabel(grads, i),
                        Describe(every[2 * i], every[2 * i + 1]), Describe(d[0], d[1]), RankList(differ));
  }
  return absl::OkStatus();
}

}  // namespace shard
}  // namespace weft
