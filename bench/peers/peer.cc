#include "bench/peers/peer.h"

#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace weft_peers {
namespace {

struct Options {
  size_t min_bytes = 4096, max_bytes = 4096, factor = 4;
  int iters = 20, warmup = 5;
  std::vector<Collective> collectives;
  std::string out;
  bool corrupt = false;  // flip one bit of every checked result: proves the check fails
};

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const Collective kAll[] = {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                           Collective::kBroadcast, Collective::kAllToAll};

size_t ParseSize(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  double unit = 1;
  if (end != text && *end != '\0' && end[1] == '\0') {
    if (*end == 'K' || *end == 'k') unit = 1 << 10;
    if (*end == 'M' || *end == 'm') unit = 1 << 20;
    if (*end == 'G' || *end == 'g') unit = 1 << 30;
    if (unit != 1) ++end;
  }
  if (errno != 0 || end == text || *end != '\0' || !(v > 0) || v * unit > 1e12) {
    throw Usage(std::string(flag) + ": '" + text + "' is not a size (a positive number, optional K, M or G)");
  }
  return static_cast<size_t>(std::llround(v * unit));
}

long ParseInt(const char* flag, const char* text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    throw Usage(std::string(flag) + ": '" + text + "' is not an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  }
  return v;
}

std::vector<Collective> ParseCollectives(const char* text) {
  std::vector<Collective> out;
  std::string s(text);
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    const std::string name = s.substr(at, comma - at);
    const Collective* c = std::find_if(std::begin(kAll), std::end(kAll),
                                       [&](Collective k) { return name == CollectiveName(k); });
    if (c == std::end(kAll)) {
      throw Usage("--collectives: '" + name + "' is not one of all_reduce, reduce_scatter, all_gather, "
                  "broadcast, alltoall");
    }
    out.push_back(*c);
    at = comma + 1;
  }
  return out;
}

Options Parse(int argc, char** argv) {
  static const option kLong[] = {{"collectives", required_argument, nullptr, 'C'},
                                 {"out", required_argument, nullptr, 'O'},
                                 {"corrupt", no_argument, nullptr, 'X'},
                                 {nullptr, 0, nullptr, 0}};
  Options o;
  optind = 1;
  opterr = 0;
  for (int c; (c = getopt_long(argc, argv, ":b:e:f:n:w:", kLong, nullptr)) != -1;) {
    switch (c) {
      case 'b': o.min_bytes = ParseSize("-b", optarg); break;
      case 'e': o.max_bytes = ParseSize("-e", optarg); break;
      case 'f': o.factor = static_cast<size_t>(ParseInt("-f", optarg, 2, 1 << 20)); break;
      case 'n': o.iters = static_cast<int>(ParseInt("-n", optarg, 1, 1 << 24)); break;
      case 'w': o.warmup = static_cast<int>(ParseInt("-w", optarg, 0, 1 << 24)); break;
      case 'C': o.collectives = ParseCollectives(optarg); break;
      case 'O': o.out = optarg; break;
      case 'X': o.corrupt = true; break;
      case ':': throw Usage(std::string(argv[optind - 1]) + " needs a value");
      default: throw Usage(std::string("unknown flag ") + argv[optind - 1]);
    }
  }
  if (optind != argc) throw Usage(std::string("unexpected argument '") + argv[optind] + "'");
  if (o.min_bytes > o.max_bytes) throw Usage("-b is larger than -e");
  if (o.out.empty()) throw Usage("--out PREFIX is required");
  if (o.collectives.empty()) o.collectives.assign(std::begin(kAll), std::end(kAll));
  return o;
}

// Elements each buffer of one call holds, and the call's count argument.
struct Layout {
  size_t count = 0, send = 0, recv = 0;
  size_t elements() const { return std::max(send, recv); }
};

Layout GetLayout(Collective c, size_t elements, size_t n) {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast: return {elements, elements, elements};
    case Collective::kReduceScatter: return {elements / n, elements / n * n, elements / n};
    case Collective::kAllGather: return {elements / n, elements / n, elements / n * n};
    case Collective::kAllToAll: return {elements / n, elements / n * n, elements / n * n};
  }
  return {};
}

// nccl-tests' inputs: small integers, so every sum is exact in float32 in
// any order and results compare bit for bit. `seed` changes per check.
float Value(int rank, size_t i, unsigned seed) {
  return static_cast<float>((i * 13 + static_cast<size_t>(rank) * 7 + seed) % 23 + 1);
}

// What rank `me` must hold in recv after the check call.
float Expected(Collective c, const Layout& l, int me, int n, size_t i, unsigned seed) {
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kReduceScatter: {
      const size_t at = c == Collective::kAllReduce ? i : static_cast<size_t>(me) * l.count + i;
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += Value(r, at, seed);
      return sum;
    }
    case Collective::kAllGather: return Value(static_cast<int>(i / l.count), i % l.count, seed);
    case Collective::kBroadcast: return Value(0, i, seed);
    case Collective::kAllToAll:
      return Value(static_cast<int>(i / l.count), static_cast<size_t>(me) * l.count + i % l.count, seed);
  }
  return 0;
}

class Bench {
 public:
  Bench(const Options& o, Library& lib) : o_(o), lib_(lib) {
    capacity_ = o.max_bytes / sizeof(float);
    send_.assign(capacity_, 0.0f);  // touched now: first-touch faults are never timed
    recv_.assign(capacity_, 0.0f);
  }

  // Broadcast is in place for every peer library (MPI_Bcast, oneCCL's and
  // gloo's broadcast): the root's data and everyone's result are in recv.
  void Call(Collective c, const Layout& l, int iter) {
    const size_t steps = std::max<size_t>(1, capacity_ / std::max<size_t>(1, l.elements()));
    const size_t shift = l.elements() * (static_cast<size_t>(iter) % steps);
    lib_.Run(c, send_.data() + shift, recv_.data() + shift, l.count);
  }

  double Time(Collective c, const Layout& l) {
    const int offsets = static_cast<int>(std::min<size_t>(capacity_ / std::max<size_t>(1, l.elements()), o_.iters));
    for (int i = 0; i < std::max(offsets, 1); ++i) Call(c, l, i);
    lib_.Barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o_.iters; ++i) Call(c, l, i);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    return elapsed.count() / o_.iters;
  }

  // Fills the inputs, poisons the outputs, runs one call at offset 0 and
  // compares every element this rank received.
  size_t Check(Collective c, const Layout& l, size_t* checked) {
    const unsigned seed = ++checks_;
    const int me = lib_.Rank(), n = lib_.Size();
    for (size_t i = 0; i < l.send; ++i) send_[i] = Value(me, i, seed);
    std::memset(recv_.data(), 0xff, l.recv * sizeof(float));  // NaN: an unwritten element shows
    if (c == Collective::kBroadcast && me == 0) std::memcpy(recv_.data(), send_.data(), l.recv * sizeof(float));
    lib_.Run(c, send_.data(), recv_.data(), l.count);
    if (o_.corrupt && l.recv > 0) recv_[0] += 1.0f;
    size_t wrong = 0;
    for (size_t i = 0; i < l.recv; ++i) {
      const float want = Expected(c, l, me, n, i, seed);
      if (std::memcmp(&recv_[i], &want, sizeof want) != 0 && wrong++ == 0) {
        std::fprintf(stderr, "%s: rank %d: %s count %zu: element %zu is %g, want %g\n", lib_.Name(), me,
                     CollectiveName(c), l.count, i, recv_[i], want);
      }
    }
    *checked = l.recv;
    return wrong;
  }

 private:
  const Options& o_;
  Library& lib_;
  size_t capacity_ = 0;
  unsigned checks_ = 0;
  std::vector<float> send_, recv_;
};

std::vector<size_t> Sizes(const Options& o) {
  std::vector<size_t> sizes;
  for (size_t s = o.min_bytes; s <= o.max_bytes; s *= o.factor) sizes.push_back(s);
  return sizes;
}

}  // namespace

const char* CollectiveName(Collective c) {
  // In the enum's order; the names are weft-bench's, which run passes through.
  static const char* const kNames[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "alltoall"};
  return kNames[static_cast<int>(c)];
}

int PeerMain(int argc, char** argv, Library& lib) {
  Options o;
  try {
    o = Parse(argc, argv);
  } catch (const Usage& e) {
    if (lib.Rank() == 0) std::fprintf(stderr, "%s: %s\n", lib.Name(), e.what());
    return 2;
  }
  const std::string path = o.out + ".rank" + std::to_string(lib.Rank()) + ".json";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "%s: --out %s: cannot write %s: %s\n", lib.Name(), o.out.c_str(), path.c_str(),
                 std::strerror(errno));
    return 2;
  }
  size_t wrong_total = 0;
  try {
    Bench bench(o, lib);
    const size_t n = static_cast<size_t>(lib.Size());
    std::fprintf(f, "{\"peer\": \"%s\", \"rank\": %d, \"nranks\": %d, \"rows\": [", lib.Name(), lib.Rank(),
                 lib.Size());
    const char* sep = "\n";
    for (Collective c : o.collectives) {
      if (!lib.Has(c)) continue;
      for (size_t size : {o.max_bytes, o.min_bytes}) {
        const Layout l = GetLayout(c, size / sizeof(float), n);
        for (int i = 0; i < o.warmup; ++i) bench.Call(c, l, i);
      }
      for (size_t size : Sizes(o)) {
        const Layout l = GetLayout(c, size / sizeof(float), n);
        const double seconds = bench.Time(c, l);
        size_t checked = 0;
        const size_t wrong = bench.Check(c, l, &checked);
        wrong_total += wrong;
        std::fprintf(f, "%s  {\"collective\": \"%s\", \"size\": %zu, \"count\": %zu, \"seconds\": %.9g, "
                     "\"checked\": %zu, \"wrong\": %zu}", sep, CollectiveName(c), l.elements() * sizeof(float),
                     l.count, seconds, checked, wrong);
        sep = ",\n";
      }
    }
    std::fprintf(f, "\n]}\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: %s\n", lib.Name(), lib.Rank(), e.what());
    std::fclose(f);
    return 2;
  }
  if (std::fclose(f) != 0) {
    std::fprintf(stderr, "%s: cannot write %s\n", lib.Name(), path.c_str());
    return 2;
  }
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace weft_peers
