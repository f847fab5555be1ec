// Runs one of everything the timeline records, for check_trace.py to read.
//
//   WEFT_TRACE=DIR trace_run --inproc 4     # 4 in-process ranks (threads)
//   WEFT_TRACE=DIR mpiexec -n 2 trace_run   # a launched world (clock alignment)
//   WEFT_TRACE=DIR trace_run --inproc 2 --exit   # exit() without destroying the communicators
//
// Each rank: blocking and host-stream collectives, a split, two reducer
// steps over small buckets (gradients marked in reverse, as backward
// produces them), and a shard group's gather, reshard and reduce-scatter.
// The results are checked too, so a hook that broke a collective fails here.
// Exit 0 on success, 77 when WEFT_TRACE is unset (nothing to check), 1 on
// the first failure, with what failed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/inproc/comm.h"
#include "comm/registry.h"
#include "core/status.h"
#include "core/stream.h"
#include "kernels/kernels.h"
#include "shard/buffer_pool.h"
#include "shard/reducer.h"
#include "shard/shard_group.h"

namespace weft {
namespace {

// Small buckets cut through the gradients, so a step has several buckets of several segments.
const std::vector<size_t> kGrads = {300, 1000, 64, 129, 777, 16, 2000, 50};

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

absl::Status Collectives(Communicator& c) {
  const int n = c.size();
  std::vector<float> buf(1024, static_cast<float>(c.rank() + 1));
  RETURN_IF_ERROR(c.AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, RedOp::kSum, nullptr));
  RETURN_IF_ERROR(Expect(buf[7] == static_cast<float>(n * (n + 1) / 2), "all_reduce: wrong sum"));
  HostStream hs;
  std::vector<float> a(4096, 1.0f), b(4096, 2.0f);
  RETURN_IF_ERROR(c.AllReduce(a.data(), a.data(), a.size(), DataType::kFloat32, RedOp::kSum, &hs));
  RETURN_IF_ERROR(c.AllReduce(b.data(), b.data(), b.size(), DataType::kFloat32, RedOp::kMax, &hs));
  RETURN_IF_ERROR(hs.Synchronize());
  RETURN_IF_ERROR(Expect(a[0] == static_cast<float>(n) && b[0] == 2.0f, "stream all_reduce: wrong result"));
  const int32_t mine = c.rank() * 10;
  std::vector<int32_t> all(static_cast<size_t>(n), -1);
  RETURN_IF_ERROR(c.AllGather(&mine, all.data(), 1, DataType::kInt32, nullptr));
  RETURN_IF_ERROR(Expect(all[static_cast<size_t>(n - 1)] == (n - 1) * 10, "all_gather: wrong block"));
  double root_value = c.rank() == 0 ? 3.25 : 0.0;
  RETURN_IF_ERROR(c.Broadcast(&root_value, &root_value, 1, DataType::kFloat64, 0, nullptr));
  RETURN_IF_ERROR(Expect(root_value == 3.25, "broadcast: wrong value"));
  const int64_t sent = c.rank() + 100;
  int64_t got = -1;
  RETURN_IF_ERROR(c.SendTagged(&sent, 1, DataType::kInt64, (c.rank() + 1) % n, 5, nullptr));
  RETURN_IF_ERROR(c.RecvTagged(&got, 1, DataType::kInt64, (c.rank() + n - 1) % n, 5, nullptr));
  RETURN_IF_ERROR(Expect(got == (c.rank() + n - 1) % n + 100, "tagged recv: wrong value"));
  int from = -1;
  RETURN_IF_ERROR(c.SendTagged(&sent, 1, DataType::kInt64, (c.rank() + 1) % n, 6, nullptr));
  RETURN_IF_ERROR(c.RecvAnySource(&got, 1, DataType::kInt64, 6, &from, nullptr));
  RETURN_IF_ERROR(Expect(from == (c.rank() + n - 1) % n, "recv from any source: wrong sender"));
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> half, c.Split(c.rank() % 2, c.rank()));
  float one = 1.0f;
  RETURN_IF_ERROR(half->AllReduce(&one, &one, 1, DataType::kFloat32, RedOp::kSum, nullptr));
  return Expect(one == static_cast<float>(half->size()), "split all_reduce: wrong sum");
}

absl::Status ReducerSteps(Communicator& c) {
  std::vector<shard::GradSpec> specs;
  for (size_t g = 0; g < kGrads.size(); ++g) {
    specs.push_back({kGrads[g], DataType::kFloat32, MemKind::kHost, "layer" + std::to_string(g)});
  }
  shard::ReducerOptions o;
  o.first_bucket_cap_bytes = 1024;
  o.bucket_cap_bytes = 4096;
  o.segment_bytes = 2048;
  o.rebuild_buckets = false;
  ASSIGN_OR_RETURN(std::unique_ptr<shard::Reducer> red, shard::Reducer::Create(&c, specs, o));
  std::vector<std::vector<float>> grads;
  for (size_t count : kGrads) grads.emplace_back(count);
  for (int step = 0; step < 2; ++step) {
    for (size_t g = 0; g < grads.size(); ++g) {
      for (float& x : grads[g]) x = static_cast<float>(c.rank() * 2 + step);
    }
    for (int g = static_cast<int>(grads.size()) - 1; g >= 0; --g) {
      RETURN_IF_ERROR(red->MarkReady(g, grads[static_cast<size_t>(g)].data(), nullptr));
    }
    RETURN_IF_ERROR(red->Finalize(nullptr));
    // The average of rank * 2 + step over ranks.
    const float want = static_cast<float>(c.size() - 1) + static_cast<float>(step);
    RETURN_IF_ERROR(Expect(grads[6][1999] == want && grads[0][0] == want, "reducer: wrong average"));
  }
  return absl::OkStatus();
}

absl::Status ShardSteps(Communicator& c) {
  const std::vector<shard::ParamSpec> params = {{"w", {64, 8}}, {"b", {8}}};
  shard::BufferPool pool;
  ASSIGN_OR_RETURN(std::unique_ptr<shard::ShardGroup> g, shard::ShardGroup::Create(&c, nullptr, params, {}, &pool));
  RETURN_IF_ERROR(g->Unshard(nullptr));
  RETURN_IF_ERROR(g->Reshard());
  std::vector<float> gw(512, 1.0f), gb(8, 2.0f);
  const kernels::TensorRef refs[] = {{gw.data(), gw.size(), DataType::kFloat32},
                                     {gb.data(), gb.size(), DataType::kFloat32}};
  return g->ReduceGrads(refs, nullptr);
}

std::string Rank(Communicator& c) {
  absl::Status s = Collectives(c);
  if (s.ok()) s = ReducerSteps(c);
  if (s.ok()) s = ShardSteps(c);
  return s.ok() ? "" : absl::StrFormat("rank %d: %s", c.rank(), s.ToString());
}

int Main(int argc, char** argv) {
  if (std::getenv("WEFT_TRACE") == nullptr) {
    std::printf("SKIP: WEFT_TRACE is not set, so nothing is traced\n");
    return 77;
  }
  CommOptions o;
  o.timeout_ms = 30000;  // a hang fails
  std::vector<std::unique_ptr<Communicator>> comms;
  const bool no_destroy = argc == 4 && std::strcmp(argv[3], "--exit") == 0;
  if ((argc == 3 || no_destroy) && std::strcmp(argv[1], "--inproc") == 0) {
    absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> made = inproc::InitInProcess(std::atoi(argv[2]), o);
    if (!made.ok()) {
      std::fprintf(stderr, "trace_run: %s\n", made.status().ToString().c_str());
      return 1;
    }
    comms = std::move(*made);
  } else if (argc == 1) {
    absl::StatusOr<std::unique_ptr<Communicator>> world = InitWorld(Backend::kAuto, o);
    if (!world.ok()) {
      std::fprintf(stderr, "trace_run: %s\n", world.status().ToString().c_str());
      return 1;
    }
    comms.push_back(std::move(*world));
  } else {
    std::fprintf(stderr, "usage: trace_run [--inproc N [--exit]]\n");
    return 2;
  }
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) threads.emplace_back([&, r] { errors[r] = Rank(*comms[r]); });
  for (auto& t : threads) t.join();
  if (no_destroy) {
    // A script that never destroys its communicators: exit() must still close the files.
    for (auto& c : comms) (void)c.release();
  }
  comms.clear();  // writes the trace files
  int rc = 0;
  for (const std::string& e : errors) {
    if (e.empty()) continue;
    std::fprintf(stderr, "trace_run: %s\n", e.c_str());
    rc = 1;
  }
  return rc;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) { return weft::Main(argc, argv); }
