#include "bench/args.h"

#include <getopt.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_format.h"
#include "bench/types.h"
#include "core/status.h"

namespace weft_bench {
namespace {

// Long options double the short ones, as in nccl-tests; --json, --backend
// and --baseline have no short form (nccl-tests' letters are all taken).
enum LongOnly : int { kJson = 1000, kBackend, kBaseline };

const option kLongOptions[] = {
    {"nthreads", required_argument, nullptr, 't'},  {"ngpus", required_argument, nullptr, 'g'},
    {"minbytes", required_argument, nullptr, 'b'},  {"maxbytes", required_argument, nullptr, 'e'},
    {"stepbytes", required_argument, nullptr, 'i'}, {"stepfactor", required_argument, nullptr, 'f'},
    {"iters", required_argument, nullptr, 'n'},     {"warmup_iters", required_argument, nullptr, 'w'},
    {"check", required_argument, nullptr, 'c'},     {"op", required_argument, nullptr, 'o'},
    {"datatype", required_argument, nullptr, 'd'},  {"root", required_argument, nullptr, 'r'},
    {"blocking", required_argument, nullptr, 'z'},  {"stream_null", required_argument, nullptr, 'y'},
    {"average", required_argument, nullptr, 'a'},   {"json", required_argument, nullptr, kJson},
    {"backend", required_argument, nullptr, kBackend}, {"baseline", required_argument, nullptr, kBaseline},
    {"help", no_argument, nullptr, 'h'},            {nullptr, 0, nullptr, 0},
};

absl::StatusOr<long> ParseInt(const char* flag, const char* text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    return weft::InvalidArgument("%s: '%s' is not an integer in [%d, %d]", flag, text, lo, hi);
  }
  return v;
}

}  // namespace

absl::StatusOr<size_t> ParseSize(const char* flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  double unit = 1;
  if (end != nullptr && *end != '\0' && end[1] == '\0') {
    switch (*end) {
      case 'K': case 'k': unit = 1024.0; ++end; break;
      case 'M': case 'm': unit = 1024.0 * 1024; ++end; break;
      case 'G': case 'g': unit = 1024.0 * 1024 * 1024; ++end; break;
      default: break;
    }
  }
  const double bytes = v * unit;
  if (errno != 0 || end == text.c_str() || *end != '\0' || !(bytes >= 0) || bytes > 1e15) {
    return weft::InvalidArgument("%s: '%s' is not a size (a number with an optional K, M or G suffix)", flag, text);
  }
  return static_cast<size_t>(std::llround(bytes));
}

namespace {

// Applies one flag; each case is its own scope for ASSIGN_OR_RETURN.
absl::Status Apply(int c, const char* arg, Options* o) {
  switch (c) {
    case 't':
    case 'g': {
      ASSIGN_OR_RETURN(long v, ParseInt(c == 't' ? "-t" : "-g", arg, 1, 1 << 20));
      if (v != 1) {
        return weft::InvalidArgument("-%c %ld: weft-bench runs one rank per process with one device; launch more "
                                     "processes with mpirun -np or torchrun --nproc_per_node", c, v);
      }
      return absl::OkStatus();
    }
    case 'b': { ASSIGN_OR_RETURN(o->min_bytes, ParseSize("-b", arg)); return absl::OkStatus(); }
    case 'e': { ASSIGN_OR_RETURN(o->max_bytes, ParseSize("-e", arg)); return absl::OkStatus(); }
    case 'i': { ASSIGN_OR_RETURN(o->step_bytes, ParseSize("-i", arg)); return absl::OkStatus(); }
    case 'f': { ASSIGN_OR_RETURN(o->step_factor, ParseInt("-f", arg, 0, 1 << 20)); return absl::OkStatus(); }
    case 'n': { ASSIGN_OR_RETURN(o->iters, ParseInt("-n", arg, 1, 1 << 24)); return absl::OkStatus(); }
    case 'w': { ASSIGN_OR_RETURN(o->warmup_iters, ParseInt("-w", arg, 0, 1 << 24)); return absl::OkStatus(); }
    case 'c': { ASSIGN_OR_RETURN(o->check, ParseInt("-c", arg, 0, 1 << 20)); return absl::OkStatus(); }
    case 'r': { ASSIGN_OR_RETURN(o->root, ParseInt("-r", arg, 0, 1 << 30)); return absl::OkStatus(); }
    case 'z': { ASSIGN_OR_RETURN(o->blocking, ParseInt("-z", arg, 0, 1)); return absl::OkStatus(); }
    case 'y': { ASSIGN_OR_RETURN(o->stream_null, ParseInt("-y", arg, 0, 1)); return absl::OkStatus(); }
    case 'a': {
      ASSIGN_OR_RETURN(long v, ParseInt("-a", arg, 0, 3));
      o->average = static_cast<Average>(v);
      return absl::OkStatus();
    }
    case 'o': { ASSIGN_OR_RETURN(o->ops, ParseOps(arg)); return absl::OkStatus(); }
    case 'd': { ASSIGN_OR_RETURN(o->types, ParseTypes(arg)); return absl::OkStatus(); }
    case kJson: o->json_path = arg; return absl::OkStatus();
    case kBackend: { ASSIGN_OR_RETURN(o->backend, ParseBackend(arg)); return absl::OkStatus(); }
    case kBaseline:
      if (std::string(arg) != "mpi" && std::string(arg) != "none") {
        return weft::InvalidArgument("--baseline: '%s' is not one of mpi, none", arg);
      }
      o->baseline_mpi = std::string(arg) == "mpi";
      return absl::OkStatus();
    default: return weft::InternalError("flag %d has no handler", c);
  }
}

}  // namespace

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  optind = 1;
  opterr = 0;  // errors are returned, and main prints them once, on rank 0
  for (;;) {
    const int c = getopt_long(argc, argv, ":t:g:b:e:i:f:n:w:c:o:d:r:z:y:a:h", kLongOptions, nullptr);
    if (c == -1) break;
    if (c == 'h') {
      o.help = true;
      return o;
    }
    if (c == ':') return weft::InvalidArgument("%s needs a value", argv[optind - 1]);
    if (c == '?') return weft::InvalidArgument("unknown flag %s (see --help)", argv[optind - 1]);
    RETURN_IF_ERROR(Apply(c, optarg, &o));
  }
  if (optind != argc - 1) {
    return weft::InvalidArgument("expected exactly one collective (all_reduce, reduce_scatter, all_gather, "
                                 "broadcast, reduce, gather, scatter, alltoall, sendrecv) besides the flags, got %d",
                                 argc - optind);
  }
  ASSIGN_OR_RETURN(o.collective, ParseCollective(argv[optind]));
  if (o.min_bytes > o.max_bytes) {
    return weft::InvalidArgument("-b %zu is larger than -e %zu", o.min_bytes, o.max_bytes);
  }
  if (o.step_factor <= 1 && o.step_bytes == 0 && o.min_bytes != o.max_bytes) {
    return weft::InvalidArgument("-i 0 with -f %zu would never reach -e %zu", o.step_factor, o.max_bytes);
  }
  return o;
}

std::string Usage(const char* argv0) {
  return absl::StrFormat(
      "USAGE: %s <all_reduce|reduce_scatter|all_gather|broadcast|reduce|gather|scatter|alltoall|sendrecv> [flags]\n"
      "  launched by mpirun, torchrun --no-python, srun or WEFT_RANK/WEFT_WORLD_SIZE/WEFT_ROOT (one rank per\n"
      "  process), or alone for one rank\n"
      "  -b,--minbytes <size>      smallest size (K/M/G suffixes; default 32M)\n"
      "  -e,--maxbytes <size>      largest size (default 32M)\n"
      "  -i,--stepbytes <size>     increment when -f is 1 (default 1M)\n"
      "  -f,--stepfactor <n>       multiply the size by n each step\n"
      "  -n,--iters <n>            timed iterations per size (default 20)\n"
      "  -w,--warmup_iters <n>     untimed iterations at the largest and smallest size (default 5)\n"
      "  -c,--check <n>            check every element of every rank n times per size (default 1; 0: off)\n"
      "  -o,--op <op>              sum, prod, max, min, avg, a comma list or all (default sum)\n"
      "  -d,--datatype <type>      int8, uint8, int16, int32, int64, half, float, double, bfloat16\n"
      "                            (or float16, float32, float64), a comma list or all (default float)\n"
      "  -r,--root <rank>          root of broadcast, reduce, gather and scatter (default 0)\n"
      "  -z,--blocking <0|1>       1: a barrier after every collective\n"
      "  -y,--stream_null <0|1>    1 (default): blocking calls (stream NULL); 0: enqueue on a weft host stream\n"
      "  -a,--average <0|1|2|3>    time reported: rank 0's, the mean (default), min or max over ranks\n"
      "  --backend <name>          auto (default), inprocess, mpi, nccl, ucx\n"
      "  --baseline <mpi|none>     also time the raw MPI collective of each size, and the ratio\n"
      "  --json <file>             also write the rows as JSON (rank 0)\n"
      "  -t, -g                    accepted for nccl-tests compatibility; must be 1\n"
      "Exit status: 0 when every checked value is right, 1 when any is wrong, 2 on errors.\n",
      argv0);
}

}  // namespace weft_bench
