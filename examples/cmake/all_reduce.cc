// One rank of a world made from the launcher's variables (torchrun's, srun's,
// mpirun's, or weft's own WEFT_RANK / WEFT_WORLD_SIZE / WEFT_ROOT), summing a
// vector across ranks through weft's C ABI and checking every element.
#include <weft/weft.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// Prints weft's message for a failed call and leaves.
void Check(weftResult_t r, const char* call) {
  if (r == weftSuccess) return;
  std::fprintf(stderr, "%s: %s: %s\n", call, weftGetErrorString(r), weftGetLastError());
  std::exit(1);
}

}  // namespace

int main() {
  int version = 0;
  Check(weftGetVersion(&version), "weftGetVersion");
  if (version < WEFT_VERSION_CODE) {
    std::fprintf(stderr, "libweft %d is older than the headers' %d\n", version, WEFT_VERSION_CODE);
    return 1;
  }
  weftComm_t world;
  Check(weftCommInitWorld(&world, nullptr), "weftCommInitWorld");
  int rank = 0, n = 0;
  Check(weftCommUserRank(world, &rank), "weftCommUserRank");
  Check(weftCommCount(world, &n), "weftCommCount");

  // Rank r contributes (r + 1) * i; the sum over n ranks is i * n * (n + 1) / 2, exact in int64.
  const size_t count = 1000;
  std::vector<long long> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<long long>((rank + 1) * i);
  Check(weftAllReduce(v.data(), v.data(), count, weftInt64, weftSum, world, nullptr), "weftAllReduce");
  for (size_t i = 0; i < count; ++i) {
    const long long want = static_cast<long long>(i) * n * (n + 1) / 2;
    if (v[i] != want) {
      std::fprintf(stderr, "rank %d: element %zu is %lld, want %lld\n", rank, i, v[i], want);
      return 1;
    }
  }
  std::printf("rank %d of %d: all_reduce of %zu int64 correct (v[%zu] = %lld), libweft %d\n", rank, n, count,
              count - 1, v[count - 1], version);
  Check(weftCommDestroy(world), "weftCommDestroy");
  return 0;
}
