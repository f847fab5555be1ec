#include "bench/table.h"

#include <cstdio>
#include <memory>

#include "bench/types.h"
#include "core/status.h"

namespace weft_bench {
namespace {

// nccl-tests' time column: three significant-ish figures in 7 characters.
std::string TimeText(double seconds) {
  const double us = seconds * 1e6;
  char buf[32];
  if (us >= 10000.0) {
    std::snprintf(buf, sizeof(buf), "%7.0f", us);
  } else if (us >= 100.0) {
    std::snprintf(buf, sizeof(buf), "%7.1f", us);
  } else {
    std::snprintf(buf, sizeof(buf), "%7.2f", us);
  }
  return buf;
}

std::string WrongText(long long wrong) { return wrong < 0 ? "N/A" : std::to_string(wrong); }

const char* RedopText(const Options& o, weftRedOp_t op) { return Reduces(o.collective) ? OpName(op) : "none"; }
int RootValue(const Options& o) { return HasRoot(o.collective) ? o.root : -1; }

// The ratio column: weft's out-of-place busbw over raw MPI's (both from the same row).
double Ratio(const Row& row) {
  return row.out_of_place.seconds > 0 ? row.baseline.seconds / row.out_of_place.seconds : 0;
}

void PrintMeasurement(const Measurement& m) {
  if (!m.ran) {
    std::printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  std::printf("  %7s  %6.2f  %6.2f  %5s", TimeText(m.seconds).c_str(), m.algbw, m.busbw, WrongText(m.wrong).c_str());
}

void JsonMeasurement(FILE* f, const char* name, const Measurement& m, bool checked) {
  if (!m.ran) {
    std::fprintf(f, "\"%s\": null", name);
    return;
  }
  std::fprintf(f, "\"%s\": {\"time_us\": %.3f, \"algbw\": %.6g, \"busbw\": %.6g", name, m.seconds * 1e6, m.algbw,
               m.busbw);
  if (checked) std::fprintf(f, ", \"wrong\": %lld", m.wrong);
  std::fprintf(f, "}");
}

}  // namespace

void Totals::Add(const Row& row) {
  for (const Measurement* m : {&row.out_of_place, &row.in_place}) {
    if (!m->ran) continue;
    if (m->wrong > 0) wrong += m->wrong;
    busbw_sum += m->busbw;
    ++busbw_count;
  }
  if (row.has_baseline) {
    baseline_busbw_sum += row.baseline.busbw;
    ++baseline_count;
  }
}

void PrintPreamble(const Options& o, const RunInfo& info) {
  std::printf("# weft-bench %s: weft %s, %d ranks, backend %s, host memory, %s\n", CollectiveName(o.collective),
              info.weft_version.c_str(), info.nranks, info.backend.c_str(),
              o.stream_null ? "blocking calls (stream NULL)" : "enqueued on a weft host stream");
  std::printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
              "validation: %d graph: 0\n",
              o.min_bytes, o.max_bytes, o.step_factor > 1 ? o.step_factor : o.step_bytes,
              o.step_factor > 1 ? "factor" : "bytes", o.warmup_iters, o.iters, o.check);
  std::printf("# MPI: %s; barriers and per-rank results over %s\n", info.mpi_version.c_str(),
              info.mpi_version == "none" ? "a second weft communicator split off the world" : "MPI_COMM_WORLD");
  if (o.blocking) std::printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
  if (o.baseline_mpi) {
    std::printf("# Baseline: raw MPI (%s) on MPI_COMM_WORLD, the same sizes and buffers, timed right after weft\n",
                info.mpi_version.c_str());
  }
  std::printf("#\n# Using devices\n");
  for (const std::string& line : info.rank_lines) std::printf("%s\n", line.c_str());
  std::printf("#\n");
}

void PrintHeader(const Options& o) {
  const bool b = o.baseline_mpi;
  std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          %s\n", "", "",
              "", "", "", b ? "       mpi baseline (out-of-place)" : "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  if (b) std::printf("  %7s  %6s  %6s  %8s", "time", "algbw", "busbw", "weft/mpi");
  std::printf("\n# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)", "(elements)", "", "", "",
              "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  if (b) std::printf("  %7s  %6s  %6s  %8s", "(us)", "(GB/s)", "(GB/s)", "(busbw)");
  std::printf("\n");
  std::fflush(stdout);
}

void PrintRow(const Options& o, const Row& row) {
  std::printf("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, TypeName(row.type), RedopText(o, row.op),
              RootValue(o));
  PrintMeasurement(row.out_of_place);
  PrintMeasurement(row.in_place);
  if (row.has_baseline) {
    std::printf("  %7s  %6.2f  %6.2f  %8.2f", TimeText(row.baseline.seconds).c_str(), row.baseline.algbw,
                row.baseline.busbw, Ratio(row));
  } else if (o.baseline_mpi) {
    std::printf("  %7s  %6s  %6s  %8s", "n/a", "n/a", "n/a", "n/a");  // MPI cannot reduce this type
  }
  std::printf("\n");
  std::fflush(stdout);
}

void PrintFooter(const Options& o, const Totals& t) {
  std::printf("# Out of bounds values : %lld %s\n", t.wrong, t.wrong != 0 ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g \n", t.avg_busbw());
  if (o.baseline_mpi && t.baseline_count > 0) {
    std::printf("# Avg bus bandwidth of the mpi baseline : %g \n", t.avg_baseline_busbw());
  }
  std::printf("#\n");
  std::fflush(stdout);
}

absl::Status WriteJson(const std::string& path, const Options& o, const RunInfo& info, const std::vector<Row>& rows,
                       const Totals& totals) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (f == nullptr) return weft::SystemError("--json %s: cannot open it for writing", path);
  FILE* out = f.get();
  // Every string written is one of weft-bench's own names: nothing needs escaping.
  std::fprintf(out,
               "{\n  \"benchmark\": \"weft-bench\", \"collective\": \"%s\", \"nranks\": %d, \"backend\": \"%s\", "
               "\"memory\": \"host\", \"weft_version\": \"%s\",\n  \"iters\": %d, \"warmup_iters\": %d, "
               "\"check\": %d, \"blocking\": %d, \"stream_null\": %d, \"average\": %d, \"baseline\": %s,\n"
               "  \"rows\": [",
               CollectiveName(o.collective), info.nranks, info.backend.c_str(), info.weft_version.c_str(), o.iters,
               o.warmup_iters, o.check, o.blocking ? 1 : 0, o.stream_null ? 1 : 0, static_cast<int>(o.average),
               o.baseline_mpi ? "\"mpi\"" : "null");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(out, "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", \"root\": %d, ",
                 i == 0 ? "" : ",", r.bytes, r.count, TypeName(r.type), RedopText(o, r.op), RootValue(o));
    JsonMeasurement(out, "out_of_place", r.out_of_place, o.check > 0);
    std::fprintf(out, ", ");
    JsonMeasurement(out, "in_place", r.in_place, o.check > 0);
    if (r.has_baseline) {
      std::fprintf(out, ", ");
      JsonMeasurement(out, "mpi", r.baseline, false);
      std::fprintf(out, ", \"ratio\": %.4f", Ratio(r));
    }
    std::fprintf(out, "}");
  }
  std::fprintf(out, "\n  ],\n  \"wrong\": %lld, \"avg_busbw\": %.6g", totals.wrong, totals.avg_busbw());
  if (totals.baseline_count > 0) std::fprintf(out, ", \"avg_busbw_mpi\": %.6g", totals.avg_baseline_busbw());
  std::fprintf(out, "\n}\n");
  if (std::ferror(out) != 0) return weft::SystemError("--json %s: write failed", path);
  return absl::OkStatus();
}

}  // namespace weft_bench
