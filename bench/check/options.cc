#include "bench/check/options.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace weft_check {

absl::StatusOr<Plan> PlanNamed(const std::string& name) {
  constexpr size_t K = 1024, M = 1024 * 1024;
  if (name == "quick") return Plan{name, {4 * K, 64 * K}, 3, {}, 0, {4 * K, 64 * K, 1 * M}, 5, 64 * K, 7, 4 * K, 5};
  if (name == "matrix") {  // quick, with the dtype x op matrix at one small size
    return Plan{name, {4 * K, 64 * K}, 3, {1 * K}, 4, {4 * K, 64 * K, 1 * M}, 5, 64 * K, 7, 4 * K, 5};
  }
  if (name == "full") {
    // The dtype x op matrix (about 170 cases) at small sizes, 4 iterations
    // each so that a rooted collective's root moves; the large sizes in float32.
    Plan p{name, {4 * K, 256 * K, 4 * M, 32 * M}, 20, {1 * K, 64 * K}, 4, {}, 20, 1 * M, 20, 256 * K, 10};
    for (size_t b = 8; b <= 64 * M; b *= 4) p.speed_bytes.push_back(b);
    return p;
  }
  return weft::InvalidArgument("--plan '%s' is not one of quick, matrix, full", name);
}

std::string Usage(const char* argv0) {
  return absl::StrFormat(
      "usage: %s [--plan quick|matrix|full] [--memory host|cuda] [--json FILE] [--plot DIR]\n"
      "          [--ranks N] [--backend mpi|ucx] [--timeout-ms MS] [--slow-ratio X]\n"
      "          [--slow-floor-us US] [--heartbeat DIR] [--seed S]\n"
      "          [--collectives all_reduce,reduce_scatter,all_gather,broadcast,reduce,gather,\n"
      "                         scatter,all_to_all,send_recv]\n"
      "Validates every collective across the job, times every rank and pair of ranks, and\n"
      "names the ranks, nodes and links that are wrong, slow or hung. Launch it as weft-bench\n"
      "(mpirun, srun, torchrun, WEFT_RANK); without a launcher it runs --ranks in-process\n"
      "ranks. Exit status 0 only when every check passed. See docs/harness.md.\n",
      argv0);
}

namespace {

template <typename T>
absl::Status Number(const std::string& flag, const std::string& text, T min, T* out) {
  T v{};
  bool ok;
  if constexpr (std::is_floating_point_v<T>) {
    ok = absl::SimpleAtod(text, &v);
  } else {
    ok = absl::SimpleAtoi(text, &v);
  }
  if (!ok || v < min) {
    return weft::InvalidArgument("%s '%s' is not a number >= %s", flag, text, absl::StrCat(min));
  }
  *out = v;
  return absl::OkStatus();
}

// One of the named values of a flag.
template <typename T>
absl::Status Choice(const std::string& flag, const std::string& text,
                    std::initializer_list<std::pair<const char*, T>> values, T* out) {
  std::vector<std::string> names;
  for (const auto& [name, value] : values) {
    if (text == name) {
      *out = value;
      return absl::OkStatus();
    }
    names.push_back(name);
  }
  return weft::InvalidArgument("%s '%s' is not one of %s", flag, text, absl::StrJoin(names, ", "));
}

}  // namespace

bool Options::Selected(Coll c) const {
  return collectives.empty() || std::find(collectives.begin(), collectives.end(), static_cast<int>(c)) !=
                                    collectives.end();
}

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  ASSIGN_OR_RETURN(o.plan, PlanNamed("quick"));
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      continue;
    }
    if (i + 1 >= argc) return weft::InvalidArgument("%s: missing its value", flag);
    const std::string v = argv[++i];
    if (flag == "--plan") {
      ASSIGN_OR_RETURN(o.plan, PlanNamed(v));
    } else if (flag == "--memory") {
      RETURN_IF_ERROR(Choice(flag, v, {{"host", weftMemoryHost}, {"cuda", weftMemoryCuda}}, &o.memory));
    } else if (flag == "--json") {
      o.json_path = v;
    } else if (flag == "--plot") {
      o.plot_dir = v;
    } else if (flag == "--ranks") {
      RETURN_IF_ERROR(Number(flag, v, 1, &o.ranks));
    } else if (flag == "--backend") {
      RETURN_IF_ERROR(Choice(flag, v, {{"mpi", weftBackendMpi}, {"ucx", weftBackendUcx}}, &o.backend));
    } else if (flag == "--timeout-ms") {
      RETURN_IF_ERROR(Number(flag, v, 1, &o.timeout_ms));
    } else if (flag == "--slow-ratio") {
      RETURN_IF_ERROR(Number(flag, v, 1.0, &o.slow_ratio));
    } else if (flag == "--slow-floor-us") {
      RETURN_IF_ERROR(Number(flag, v, 0.0, &o.slow_floor_us));
    } else if (flag == "--heartbeat") {
      o.heartbeat_dir = v;
    } else if (flag == "--seed") {
      RETURN_IF_ERROR(Number<uint64_t>(flag, v, 0, &o.seed));
    } else if (flag == "--collectives") {
      o.collectives.clear();
      for (const std::string& name : std::vector<std::string>(absl::StrSplit(v, ','))) {
        Coll c;
        if (!CollNamed(name, &c)) {
          std::vector<std::string> names;
          for (Coll k : kColls) names.push_back(Name(k));
          return weft::InvalidArgument("--collectives: '%s' is not one of %s", name, absl::StrJoin(names, ", "));
        }
        o.collectives.push_back(static_cast<int>(c));
      }
    } else {
      return weft::InvalidArgument("unknown flag '%s' (--help lists them)", flag);
    }
  }
  return o;
}

}  // namespace weft_check
