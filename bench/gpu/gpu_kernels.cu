// GPU kernel benchmark: achieved bandwidth of the CUDA multi-tensor kernels
// on the tensor lists of bench/data, beside two baselines measured in the
// same run on the same bytes: one device-to-device cudaMemcpyAsync of the
// list's total bytes (the ceiling), and one cudaMemcpyAsync per tensor (what
// a framework does without a fused kernel). The copies are timed one-shot
// (the launch table built on the host on every call) and planned (a
// DevicePlan made once, its table in device memory: kernels/copy_plan.h's
// path on CUDA memory).
//
// Bandwidth counts bytes read plus bytes written, for the kernels and the
// copies alike; times are medians over --reps runs, each timed by its own
// pair of CUDA events after --warmup runs. After timing, every kernel's
// output is checked bit for bit against kernels/reference/convert.h (the
// norm against the reference blocking), so a fast wrong kernel cannot pass.
//
// It calls the launchers of kernels/cuda/launch.h directly (no Abseil), so it
// also builds with nvcc alone: tools/gpu-check does that where meson or its
// dependencies are missing.
//
//   gpu_kernels --data bench/data --lists resnet50,gpt2_small --reps 30 --csv out.csv
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/launch.h"
#include "kernels/reference/convert.h"
#include "kernels/types.h"

namespace {

using weft::DataType;
using weft::kernels::Segment;
using weft::kernels::TensorRef;

#define CHECK_CUDA(expr)                                                                                  \
  do {                                                                                                    \
    const cudaError_t e_ = (expr);                                                                        \
    if (e_ != cudaSuccess) {                                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_));        \
      std::exit(2);                                                                                       \
    }                                                                                                     \
  } while (0)

#define CHECK_LAUNCH(expr)                                                                                \
  do {                                                                                                    \
    const int e_ = (expr);                                                                                \
    if (e_ != 0) {                                                                                        \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                                  \
                   weft::kernels::cuda::ErrorString(e_));                                                 \
      std::exit(2);                                                                                       \
    }                                                                                                     \
  } while (0)

struct Options {
  std::string data = "bench/data";
  std::vector<std::string> lists = {"resnet50", "gpt2_small", "llama_layer", "huge_3", "tiny_10k"};
  int reps = 30;
  int warmup = 5;
  std::string csv;
  bool check = true;
};

// "name d0xd1x..." per line; '#' comments.
std::vector<size_t> ReadList(const std::string& path) {
  std::vector<size_t> sizes;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream ls(line);
    std::string name, shape;
    if (!(ls >> name >> shape)) continue;
    size_t n = 1;
    std::istringstream ss(shape);
    std::string dim;
    while (std::getline(ss, dim, 'x')) n *= std::stoull(dim);
    sizes.push_back(n);
  }
  return sizes;
}

// torchvision's ResNet-50 in named_parameters() order (bench/data/make_tensor_lists.py),
// used when bench/data/resnet50.tensors is missing: it is the target list.
std::vector<size_t> ResNet50() {
  std::vector<size_t> t = {64 * 3 * 7 * 7, 64, 64};
  size_t inplanes = 64;
  const size_t widths[] = {64, 128, 256, 512}, blocks[] = {3, 4, 6, 3};
  for (int l = 0; l < 4; ++l) {
    const size_t w = widths[l];
    for (size_t b = 0; b < blocks[l]; ++b) {
      t.insert(t.end(), {w * inplanes, w, w, w * w * 9, w, w, 4 * w * w, 4 * w, 4 * w});
      if (b == 0) t.insert(t.end(), {4 * w * inplanes, 4 * w, 4 * w});
      inplanes = 4 * w;
    }
  }
  t.insert(t.end(), {1000 * 2048, 1000});
  return t;
}

// Device memory for a list: every tensor 256-byte aligned, as a caching allocator hands them out.
struct DeviceList {
  explicit DeviceList(const std::vector<size_t>& sizes, size_t elem) {
    size_t at = 0;
    for (size_t n : sizes) {
      offsets.push_back(at);
      at += (n * elem + 255) / 256 * 256;
    }
    bytes = at;
    CHECK_CUDA(cudaMalloc(&base, std::max<size_t>(bytes, 256)));
    for (size_t i = 0; i < sizes.size(); ++i) ptrs.push_back(static_cast<char*>(base) + offsets[i]);
  }
  ~DeviceList() { cudaFree(base); }
  void* base = nullptr;
  size_t bytes = 0;
  std::vector<size_t> offsets;
  std::vector<void*> ptrs;
};

class Timer {
 public:
  explicit Timer(cudaStream_t s) : s_(s) {
    CHECK_CUDA(cudaEventCreate(&a_));
    CHECK_CUDA(cudaEventCreate(&b_));
  }
  ~Timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  // Median milliseconds of `reps` runs of f() after `warmup` untimed ones.
  template <class F>
  double Median(int warmup, int reps, F&& f) {
    for (int i = 0; i < warmup; ++i) f();
    std::vector<float> ms(reps);
    for (int i = 0; i < reps; ++i) {
      CHECK_CUDA(cudaEventRecord(a_, s_));
      f();
      CHECK_CUDA(cudaEventRecord(b_, s_));
      CHECK_CUDA(cudaEventSynchronize(b_));
      CHECK_CUDA(cudaEventElapsedTime(&ms[i], a_, b_));
    }
    std::sort(ms.begin(), ms.end());
    return reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
  }

 private:
  cudaStream_t s_;
  cudaEvent_t a_, b_;
};

struct Row {
  std::string list, op;
  size_t tensors, elems, bytes;  // bytes read + written
  double ms, gbps, vs_copy, speedup_per_tensor;
  std::string check;
};

// Random finite floats of varied magnitude (never zeros).
std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> m(0.5f, 2.0f);
  std::uniform_int_distribution<int> e(-20, 20), sign(0, 1);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (sign(rng) ? -1.0f : 1.0f) * std::ldexp(m(rng), e(rng));
  return v;
}

// Uploads host tensor i (packed in `host`) into the list.
void Upload(DeviceList& d, const std::vector<size_t>& sizes, const void* host, size_t elem) {
  size_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK_CUDA(cudaMemcpy(d.ptrs[i], static_cast<const char*>(host) + at * elem, sizes[i] * elem,
                          cudaMemcpyHostToDevice));
    at += sizes[i];
  }
  // From pageable memory cudaMemcpy may return before the bytes reach the
  // device, and the non-blocking stream the kernels run on does not wait for
  // the legacy stream: without this, check_unflatten's run could read a
  // gradient still being uploaded.
  CHECK_CUDA(cudaDeviceSynchronize());
}

std::vector<unsigned char> Download(const void* dev, size_t bytes) {
  std::vector<unsigned char> h(bytes);
  if (bytes > 0) CHECK_CUDA(cudaMemcpy(h.data(), dev, bytes, cudaMemcpyDeviceToHost));
  return h;
}

// The reference's value of every element of a copy, compared with `got`.
std::string CheckCopy(const void* src, DataType st, void* expect_dst, const void* got, DataType dt, size_t n,
                      float scale, bool accumulate) {
  for (size_t j = 0; j < n; ++j) {
    weft::kernels::reference::ConvertElement(src, j, st, expect_dst, j, dt, scale, accumulate);
  }
  const size_t es = weft::ElementSize(dt);
  for (size_t j = 0; j < n; ++j) {
    if (std::memcmp(static_cast<const char*>(expect_dst) + j * es, static_cast<const char*>(got) + j * es, es) != 0) {
      return "WRONG at element " + std::to_string(j);
    }
  }
  return "ok";
}

// The reference blocking of kernels/types.h, in double.
double RefSumSquares(const float* x, size_t n) {
  double sum = 0.0;
  std::vector<double> lane(weft::kernels::kNormLanes);
  for (size_t b = 0; b < n; b += weft::kernels::kNormBlock) {
    std::fill(lane.begin(), lane.end(), 0.0);
    const size_t e = std::min(n, b + weft::kernels::kNormBlock);
    for (size_t j = b; j < e; ++j) lane[(j - b) % weft::kernels::kNormLanes] += double(x[j]) * double(x[j]);
    for (size_t w = weft::kernels::kNormLanes / 2; w >= 1; w /= 2) {
      for (size_t l = 0; l < w; ++l) lane[l] += lane[l + w];
    }
    sum += lane[0];
  }
  return sum;
}

void RunList(const std::string& name, const std::vector<size_t>& sizes, const Options& o, cudaStream_t s,
             std::vector<Row>& rows) {
  size_t elems = 0;
  for (size_t n : sizes) elems += n;
  const size_t nt = sizes.size();
  Timer timer(s);
  std::printf("# %s: %zu tensors, %zu elements (%.1f MiB as float32)\n", name.c_str(), nt, elems,
              elems * 4.0 / (1 << 20));

  DeviceList grads(sizes, 4);  // float32 gradients
  const std::vector<float> host = RandomFloats(elems, 7);
  Upload(grads, sizes, host.data(), 4);
  void* bucket32 = nullptr;
  void* bucket16 = nullptr;
  void* scratch = nullptr;
  CHECK_CUDA(cudaMalloc(&bucket32, std::max<size_t>(elems * 4, 256)));
  CHECK_CUDA(cudaMalloc(&bucket16, std::max<size_t>(elems * 2, 256)));
  CHECK_CUDA(cudaMalloc(&scratch, std::max<size_t>(elems * 4, 256)));
  float* dnorm = nullptr;
  int* dflag = nullptr;
  CHECK_CUDA(cudaMalloc(&dnorm, (nt + 1) * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dflag, sizeof(int)));
  CHECK_CUDA(cudaMemsetAsync(dflag, 0, sizeof(int), s));

  std::vector<TensorRef> refs(nt);
  std::vector<Segment> to32(nt), to16(nt), from16(nt);
  size_t at = 0;
  for (size_t i = 0; i < nt; ++i) {
    refs[i] = {grads.ptrs[i], sizes[i], DataType::kFloat32};
    to32[i] = {grads.ptrs[i], DataType::kFloat32, static_cast<char*>(bucket32) + at * 4, DataType::kFloat32, sizes[i]};
    to16[i] = {grads.ptrs[i], DataType::kFloat32, static_cast<char*>(bucket16) + at * 2, DataType::kBfloat16, sizes[i]};
    from16[i] = {static_cast<char*>(bucket16) + at * 2, DataType::kBfloat16, grads.ptrs[i], DataType::kFloat32, sizes[i]};
    at += sizes[i];
  }

  // ---- baselines
  const size_t b32 = elems * 4;
  const double copy_ms = timer.Median(o.warmup, o.reps, [&] {
    CHECK_CUDA(cudaMemcpyAsync(scratch, bucket32, b32, cudaMemcpyDeviceToDevice, s));
  });
  const double copy_gbps = 2.0 * b32 / (copy_ms * 1e6);
  const double per_tensor_ms = timer.Median(o.warmup, o.reps, [&] {
    for (size_t i = 0; i < nt; ++i) {
      CHECK_CUDA(cudaMemcpyAsync(to32[i].dst, to32[i].src, sizes[i] * 4, cudaMemcpyDeviceToDevice, s));
    }
  });
  rows.push_back({name, "d2d cudaMemcpy (ceiling)", nt, elems, 2 * b32, copy_ms, copy_gbps, 1.0, 0.0, "-"});
  rows.push_back({name, "cudaMemcpy per tensor", nt, elems, 2 * b32, per_tensor_ms, 2.0 * b32 / (per_tensor_ms * 1e6),
                  2.0 * b32 / (per_tensor_ms * 1e6) / copy_gbps, 1.0, "-"});

  auto add = [&](const std::string& op, size_t bytes, double ms, const std::string& check, bool vs_per_tensor) {
    const double gbps = bytes / (ms * 1e6);
    rows.push_back({name, op, nt, elems, bytes, ms, gbps, gbps / copy_gbps, vs_per_tensor ? per_tensor_ms / ms : 0.0,
                    check});
  };

  // ---- the three copies, each one-shot (CopySegments: its launch table
  // built on the host and passed in the parameters on every call) and
  // planned (a DevicePlan made once: the table in device memory, a run is
  // one launch), each output poisoned before timing and checked after it.
  using weft::kernels::cuda::DevicePlan;
  const float scale = 1.0f / 8;
  auto poison = [&](void* p, size_t bytes) { CHECK_CUDA(cudaMemsetAsync(p, 0xA5, bytes, s)); };
  auto check_f32 = [&]() -> std::string {
    CHECK_CUDA(cudaStreamSynchronize(s));
    const unsigned char* h = reinterpret_cast<const unsigned char*>(host.data());
    return Download(bucket32, b32) == std::vector<unsigned char>(h, h + b32) ? "ok" : "WRONG";
  };
  auto check_bf16 = [&]() -> std::string {
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<unsigned char> want(elems * 2);
    return CheckCopy(host.data(), DataType::kFloat32, want.data(), Download(bucket16, elems * 2).data(),
                     DataType::kBfloat16, elems, scale, false);
  };
  // One accumulation from the original values, through `run`; the gradients are restored afterwards.
  auto check_unflatten = [&](const std::function<void()>& run) -> std::string {
    Upload(grads, sizes, host.data(), 4);
    run();
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<unsigned char> got(b32);
    size_t off = 0;
    for (size_t i = 0; i < nt; ++i) {
      if (sizes[i] > 0) CHECK_CUDA(cudaMemcpy(got.data() + off * 4, grads.ptrs[i], sizes[i] * 4, cudaMemcpyDeviceToHost));
      off += sizes[i];
    }
    std::vector<float> want(host);
    const std::string r = CheckCopy(Download(bucket16, elems * 2).data(), DataType::kBfloat16, want.data(), got.data(),
                                    DataType::kFloat32, elems, 1.0f, true);
    Upload(grads, sizes, host.data(), 4);
    return r;
  };
  for (const bool planned : {false, true}) {
    DevicePlan* plan32 = nullptr;
    DevicePlan* plan16 = nullptr;
    DevicePlan* plan_back = nullptr;
    if (planned) {
      CHECK_LAUNCH(weft::kernels::cuda::CopyPlanCreate(to32.data(), nt, false, &plan32));
      CHECK_LAUNCH(weft::kernels::cuda::CopyPlanCreate(to16.data(), nt, false, &plan16));
      CHECK_LAUNCH(weft::kernels::cuda::CopyPlanCreate(from16.data(), nt, true, &plan_back));
    }
    auto copy = [&](const std::vector<Segment>& segs, DevicePlan* plan, float sc, bool accumulate) {
      if (plan != nullptr) {
        CHECK_LAUNCH(weft::kernels::cuda::CopyPlanRun(plan, sc, s));
      } else {
        CHECK_LAUNCH(weft::kernels::cuda::CopySegments(segs.data(), nt, sc, accumulate, s));
      }
    };
    const std::string suffix = planned ? " planned" : "";

    poison(bucket32, b32);
    double ms = timer.Median(o.warmup, o.reps, [&] { copy(to32, plan32, 1.0f, false); });
    add("flatten f32->f32" + suffix, 2 * b32, ms, o.check ? check_f32() : "unchecked", true);

    poison(bucket16, elems * 2);
    ms = timer.Median(o.warmup, o.reps, [&] { copy(to16, plan16, scale, false); });
    add("flatten f32->bf16 x1/8" + suffix, elems * 6, ms, o.check ? check_bf16() : "unchecked", false);

    // accumulating into the gradients: their values drift while timing, then are restored
    ms = timer.Median(o.warmup, o.reps, [&] { copy(from16, plan_back, 1.0f, true); });
    add("unflatten bf16->f32 +=" + suffix, elems * 10, ms,
        o.check ? check_unflatten([&] { copy(from16, plan_back, 1.0f, true); }) : "unchecked", false);
    Upload(grads, sizes, host.data(), 4);

    for (DevicePlan* p : {plan32, plan16, plan_back}) CHECK_LAUNCH(weft::kernels::cuda::CopyPlanDestroy(p));
  }

  // ---- L2 norm of the float32 list
  std::string check = "unchecked";
  double ms = timer.Median(o.warmup, o.reps, [&] {
    CHECK_LAUNCH(weft::kernels::cuda::L2Norm(refs.data(), nt, dnorm, dnorm + nt, s));
  });
  if (o.check) {
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::vector<float> got(nt + 1);
    CHECK_CUDA(cudaMemcpy(got.data(), dnorm, (nt + 1) * sizeof(float), cudaMemcpyDeviceToHost));
    double all = 0.0;
    size_t off = 0;
    check = "ok";
    for (size_t i = 0; i < nt; ++i) {
      const double sq = RefSumSquares(host.data() + off, sizes[i]);
      off += sizes[i];
      all += sq;
      if (weft::FloatBits(static_cast<float>(std::sqrt(sq))) != weft::FloatBits(got[i])) check = "WRONG norm " + std::to_string(i);
    }
    if (weft::FloatBits(static_cast<float>(std::sqrt(all))) != weft::FloatBits(got[nt])) check = "WRONG total";
  }
  add("l2 norm f32", b32, ms, check, false);

  // ---- unscale in place (inv_scale 1: the values stay, so every rep sees the same data)
  ms = timer.Median(o.warmup, o.reps, [&] {
    CHECK_LAUNCH(weft::kernels::cuda::Unscale(refs.data(), nt, 1.0f, dflag, s));
  });
  if (o.check) {
    int flag = -1;
    CHECK_CUDA(cudaMemcpy(&flag, dflag, sizeof(int), cudaMemcpyDeviceToHost));
    check = flag == 0 ? "ok" : "WRONG flag";
  }
  add("unscale f32 in place", 2 * b32, ms, check, false);

  cudaFree(bucket32);
  cudaFree(bucket16);
  cudaFree(scratch);
  cudaFree(dnorm);
  cudaFree(dflag);
}

bool ParseArgs(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--data") {
      o.data = next();
    } else if (a == "--lists") {
      o.lists.clear();
      std::istringstream ss(next());
      std::string l;
      while (std::getline(ss, l, ',')) o.lists.push_back(l);
    } else if (a == "--reps") {
      o.reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--warmup") {
      o.warmup = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--csv") {
      o.csv = next();
    } else if (a == "--no-check") {
      o.check = false;
    } else {
      std::fprintf(stderr, "usage: %s [--data DIR] [--lists a,b] [--reps N] [--warmup N] [--csv FILE] [--no-check]\n",
                   argv[0]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, o)) return 2;
  int ndev = 0;
  const cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    std::printf("SKIP: no usable CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# device 0: %s, %d SMs, %.0f MiB L2, %.1f GiB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize / 1048576.0, prop.totalGlobalMem / 1073741824.0);
  cudaStream_t s = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  std::vector<Row> rows;
  for (const std::string& name : o.lists) {
    std::vector<size_t> sizes = ReadList(o.data + "/" + name + ".tensors");
    if (sizes.empty() && name == "resnet50") sizes = ResNet50();
    if (sizes.empty()) {
      std::printf("# %s: no %s/%s.tensors, skipped\n", name.c_str(), o.data.c_str(), name.c_str());
      continue;
    }
    RunList(name, sizes, o, s, rows);
  }

  std::printf("%-12s %7s %11s  %-30s %9s %9s %6s %8s  %s\n", "list", "tensors", "elements", "op", "time_us",
              "GB/s", "x_d2d", "x_per_t", "check");
  bool wrong = false;
  for (const Row& r : rows) {
    std::printf("%-12s %7zu %11zu  %-30s %9.1f %9.1f %6.2f %8s  %s\n", r.list.c_str(), r.tensors, r.elems,
                r.op.c_str(), r.ms * 1e3, r.gbps, r.vs_copy,
                r.speedup_per_tensor > 0 ? (std::to_string(r.speedup_per_tensor).substr(0, 5) + "x").c_str() : "",
                r.check.c_str());
    wrong |= r.check.rfind("WRONG", 0) == 0;
  }
  // The issue's targets, judged on the float32 flatten, one-shot and planned.
  for (const Row& r : rows) {
    if (r.op != "flatten f32->f32" && r.op != "flatten f32->f32 planned") continue;
    if (r.elems * 4 >= (size_t{64} << 20)) {
      std::printf("TARGET %-12s %-24s >= 0.85 x d2d copy (list >= 64 MiB): %.2f  %s\n", r.list.c_str(),
                  r.op.c_str(), r.vs_copy, r.vs_copy >= 0.85 ? "PASS" : "MISS");
    }
    if (r.list == "resnet50") {
      std::printf("TARGET resnet50     %-24s >= 3x faster than one copy per tensor: %.2fx  %s\n", r.op.c_str(),
                  r.speedup_per_tensor, r.speedup_per_tensor >= 3.0 ? "PASS" : "MISS");
    }
  }
  if (!o.csv.empty()) {
    std::ofstream out(o.csv);
    out << "list,tensors,elements,op,bytes,time_ms,gbps,x_d2d,x_per_tensor,check\n";
    for (const Row& r : rows) {
      out << r.list << ',' << r.tensors << ',' << r.elems << ',' << r.op << ',' << r.bytes << ',' << r.ms << ','
          << r.gbps << ',' << r.vs_copy << ',' << r.speedup_per_tensor << ',' << r.check << '\n';
    }
  }
  cudaStreamDestroy(s);
  return wrong ? 1 : 0;
}
