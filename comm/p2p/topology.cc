#include "comm/p2p/topology.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

constexpr std::array<const char*, kNumHierKinds> kNames = {"all_reduce", "reduce_scatter", "all_gather",
                                                           "broadcast"};

// "64K", "1M", "0", "1048576": bytes; false for anything else.
bool ParseBytes(std::string s, size_t* out) {
  uint64_t scale = 1;
  if (!s.empty()) {
    switch (std::toupper(static_cast<unsigned char>(s.back()))) {
      case 'K': scale = uint64_t{1} << 10; break;
      case 'M': scale = uint64_t{1} << 20; break;
      case 'G': scale = uint64_t{1} << 30; break;
      default: break;
    }
    if (scale != 1) s.pop_back();
  }
  uint64_t v = 0;
  if (s.empty() || !absl::SimpleAtoi(s, &v) || v > SIZE_MAX / scale) return false;
  *out = static_cast<size_t>(v * scale);
  return true;
}

std::string Size(size_t b) {
  if (b % (size_t{1} << 20) == 0) return absl::StrFormat("%zu MiB", b >> 20);
  if (b % (size_t{1} << 10) == 0) return absl::StrFormat("%zu KiB", b >> 10);
  return absl::StrFormat("%zu bytes", b);
}

std::string Bytes(size_t b) {
  if (b == HierTable::kNever) return "never";
  if (b == 0) return "always";
  return "from " + Size(b);
}

}  // namespace

bool Topology::uniform() const {
  return std::all_of(ranks_of.begin(), ranks_of.end(),
                     [&](const std::vector<int>& r) { return r.size() == ranks_of.front().size(); });
}

std::string Topology::Describe() const {
  if (uniform()) return absl::StrFormat("%d node%s x %d rank%s", nodes(), nodes() == 1 ? "" : "s", local_size(),
                                        local_size() == 1 ? "" : "s");
  std::vector<size_t> counts;
  for (const std::vector<int>& r : ranks_of) counts.push_back(r.size());
  return absl::StrFormat("%d nodes (%s ranks)", nodes(), absl::StrJoin(counts, ", "));
}

Topology Topology::FromKeys(const std::vector<std::string>& keys) {
  Topology t;
  std::map<std::string, int> index;
  for (size_t r = 0; r < keys.size(); ++r) {
    auto [it, fresh] = index.emplace(keys[r], static_cast<int>(t.ranks_of.size()));
    if (fresh) t.ranks_of.emplace_back();
    std::vector<int>& mates = t.ranks_of[static_cast<size_t>(it->second)];
    t.node_of.push_back(it->second);
    t.local_of.push_back(static_cast<int>(mates.size()));
    mates.push_back(static_cast<int>(r));
  }
  return t;
}

const char* Name(HierKind k) { return kNames[static_cast<size_t>(k)]; }

bool HierTable::any() const {
  return std::any_of(from_bytes.begin(), from_bytes.end(), [](size_t b) { return b != kNever; });
}

std::string HierTable::Describe() const {
  std::vector<std::string> parts;
  for (int k = 0; k < kNumHierKinds; ++k) {
    parts.push_back(absl::StrFormat("%s %s", kNames[static_cast<size_t>(k)], Bytes(from_bytes[static_cast<size_t>(k)])));
  }
  if (single_rank_nodes) parts.push_back("also with one rank per node");
  if (piece_bytes != 0) parts.push_back(absl::StrFormat("all_reduce in pieces of %s", Size(piece_bytes)));
  return absl::StrJoin(parts, ", ");
}

uint64_t HierTable::Hash() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (size_t b : from_bytes) mix(b);
  mix(single_rank_nodes ? 1 : 0);
  mix(piece_bytes);
  return h;
}

// From bench/results/hierarchy.md (2 nodes x 2 ranks, veth links): at 16 KiB
// the steps' extra latency is as large as what they save (all_reduce 0.91 of
// flat's speed, the others 1.04-1.25 within the runs' spread); from 64 KiB
// every collective is 1.14-7.2 times faster hierarchical.
//
// all_reduce in 8 MiB pieces: over 1 gbit/s links the node's reduce-scatter
// and all-gather then run while the network carries another piece; 8 MiB
// had the lowest medians of 2, 4 and 8 MiB at 16-256 MiB, and every piece
// size beat no pieces from 64 MiB (bench/results/hierarchy.md). A message of
// one piece or less runs unpipelined.
HierTable DefaultHierTable() {
  HierTable t;
  t.from_bytes = {size_t{64} << 10, size_t{64} << 10, size_t{64} << 10, size_t{64} << 10};
  t.piece_bytes = size_t{8} << 20;
  return t;
}

absl::StatusOr<HierTable> ParseHierTable(const std::string& spec) {
  HierTable t = DefaultHierTable();
  if (spec.empty()) return t;
  std::vector<std::string> items = absl::StrSplit(spec, ',');
  // A leading auto, on or off sets the whole table; items after it amend it.
  if (items[0] == "auto" || items[0] == "on" || items[0] == "off") {
    if (items[0] == "off") t.from_bytes.fill(HierTable::kNever);
    if (items[0] == "on") {
      t.from_bytes.fill(0);
      t.single_rank_nodes = true;
    }
    items.erase(items.begin());
  }
  for (const std::string& item : items) {
    const std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const auto name = std::find(kNames.begin(), kNames.end(), kv[0]);
    if (kv.size() != 2 || (name == kNames.end() && kv[0] != "piece")) {
      return InvalidArgument("WEFT_HIER=\"%s\": \"%s\" is not COLLECTIVE=BYTES with COLLECTIVE one of all_reduce, "
                             "reduce_scatter, all_gather, broadcast, nor piece=BYTES (the value may start with "
                             "auto, on or off)", spec, item);
    }
    size_t& value = name == kNames.end() ? t.piece_bytes : t.from_bytes[static_cast<size_t>(name - kNames.begin())];
    if (kv[1] == "off") {
      value = name == kNames.end() ? 0 : HierTable::kNever;
    } else if (!ParseBytes(kv[1], &value)) {
      return InvalidArgument("WEFT_HIER=\"%s\": \"%s\" for %s is neither off nor a byte count such as 0, 65536, "
                             "64K or 1M", spec, kv[1], kv[0]);
    }
  }
  return t;
}

bool HierarchyApplies(const HierTable& table, const Topology& topo) {
  return table.any() && topo.nodes() >= 2 && topo.uniform() && (topo.local_size() >= 2 || table.single_rank_nodes);
}

bool UseHierarchy(const HierTable& table, HierKind kind, size_t bytes, const Topology& topo) {
  return HierarchyApplies(table, topo) && bytes > 0 && bytes >= table.from_bytes[static_cast<size_t>(kind)];
}

std::vector<HierPiece> PlanHierPieces(size_t count, size_t elem_bytes, int local_size, size_t piece_bytes) {
  const size_t L = local_size > 0 ? static_cast<size_t>(local_size) : 1;
  const size_t slices = count / L;  // elements of the body per local rank
  if (slices == 0) return {};
  size_t n = 1;
  if (piece_bytes != 0 && elem_bytes != 0) {
    const size_t body_bytes = slices * L * elem_bytes;
    n = std::min({(body_bytes + piece_bytes - 1) / piece_bytes, kMaxHierPieces, slices});
  }
  // Every piece but the last holds `per` elements of each local rank's slice.
  const size_t per = (slices + n - 1) / n;
  std::vector<HierPiece> pieces;
  for (size_t done = 0; done < slices; done += per) {
    pieces.push_back({done * L, std::min(per, slices - done) * L});
  }
  return pieces;
}

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// The digits at `at` (the caller checked there is one), and where they end.
size_t ReadNumber(const std::string& m, size_t at, long long* value) {
  size_t end = at;
  *value = 0;
  while (end < m.size() && IsDigit(m[end])) {
    if (*value < 1000000000) *value = *value * 10 + (m[end] - '0');
    ++end;
  }
  return end;
}

}  // namespace

std::string RenameRanks(const std::string& m, const std::vector<int>& world_of, int world_size) {
  std::string out;
  size_t i = 0;
  while (i < m.size()) {
    const bool word =
        (m[i] == 'r' || m[i] == 'R') && m.compare(i + 1, 3, "ank") == 0 && (i == 0 || !IsWordChar(m[i - 1]));
    if (!word) {
      out.push_back(m[i++]);
      continue;
    }
    // "rank", "ranks", "rank(s)", then ":", spaces and "{" before the numbers.
    size_t j = i + 4;
    if (m.compare(j, 3, "(s)") == 0) {
      j += 3;
    } else if (j < m.size() && m[j] == 's') {
      ++j;
    }
    if (j < m.size() && IsWordChar(m[j])) {  // "ranked", "rankings": another word
      out.append(m, i, j - i);
      i = j;
      continue;
    }
    if (j < m.size() && m[j] == ':') ++j;
    while (j < m.size() && m[j] == ' ') ++j;
    if (j < m.size() && m[j] == '{') ++j;
    out.append(m, i, j - i);
    i = j;
    // The list: numbers separated by "," and spaces.
    bool first = true;
    while (i < m.size() && IsDigit(m[i])) {
      long long r = 0;
      const size_t end = ReadNumber(m, i, &r);
      if (end < m.size() && IsWordChar(m[end])) break;  // "2nd", "3ms": not a rank
      if (r < static_cast<long long>(world_of.size())) {
        absl::StrAppend(&out, world_of[static_cast<size_t>(r)]);
      } else {
        out.append(m, i, end - i);
      }
      i = end;
      if (first && m.compare(i, 4, " of ") == 0 && i + 4 < m.size() && IsDigit(m[i + 4])) {
        long long n = 0;
        const size_t n_end = ReadNumber(m, i + 4, &n);
        absl::StrAppend(&out, " of ", world_size);
        i = n_end;
      }
      first = false;
      size_t k = i;
      while (k < m.size() && (m[k] == ',' || m[k] == ' ')) ++k;
      if (k == i || k >= m.size() || !IsDigit(m[k]) || m.compare(i, 1, ",") != 0) break;
      out.append(m, i, k - i);
      i = k;
    }
  }
  return out;
}

}  // namespace p2p
}  // namespace weft
