#include "bench/check/pattern.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"

namespace weft_check {

const char* Name(Coll c) {
  static constexpr const char* kNames[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  return kNames[static_cast<int>(c)];
}

namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double Load(const void* p, size_t j, weftDataType_t t) {
  if (t == weftFloat32) {
    float f;
    std::memcpy(&f, static_cast<const char*>(p) + j * 4, 4);
    return f;
  }
  double d;
  std::memcpy(&d, static_cast<const char*>(p) + j * 8, 8);
  return d;
}

void Store(void* p, size_t j, weftDataType_t t, double v) {
  if (t == weftFloat32) {
    const float f = static_cast<float>(v);
    std::memcpy(static_cast<char*>(p) + j * 4, &f, 4);
  } else {
    std::memcpy(static_cast<char*>(p) + j * 8, &v, 8);
  }
}

}  // namespace

Pattern::Pattern(Coll c, int nranks, uint64_t seed, size_t count)
    : coll_(c), nranks_(nranks), seed_(seed), count_(count) {
  // float32 holds sums of 24 distinct powers of two and the all-gather's
  // rank tags (rank * 4096 + 12 bits) up to 4096 ranks exactly.
  const bool wide = c == Coll::kAllReduce || c == Coll::kReduceScatter ? nranks > 24 : nranks > 4096;
  dtype_ = wide ? weftFloat64 : weftFloat32;
  bits_ = wide ? 53 : 24;
}

size_t Pattern::send_count() const { return coll_ == Coll::kReduceScatter ? count_ * nranks_ : count_; }
size_t Pattern::recv_count() const { return coll_ == Coll::kAllGather ? count_ * nranks_ : count_; }

uint64_t Pattern::Mask(size_t element, int iter) const {
  return Mix(seed_ ^ Mix(static_cast<uint64_t>(element) * 1315423911u + static_cast<uint64_t>(iter)));
}

double Pattern::Contribution(int rank, size_t element, int iter) const {
  switch (coll_) {
    case Coll::kAllReduce:
    case Coll::kReduceScatter: {
      const int b = rank % bits_;
      return (Mask(element, iter) >> b & 1) ? static_cast<double>(uint64_t{1} << b) : 0.0;
    }
    case Coll::kAllGather: return static_cast<double>(rank) * 4096.0 + static_cast<double>(Mask(element, iter) & 0xfff);
    case Coll::kBroadcast: return static_cast<double>(Mask(element, iter) & 0xffff);
  }
  return 0;
}

// Send element j is element `offset + j` of the logical vector: the
// all-gather's rank's own block, everyone else's whole buffer.
void Pattern::Fill(void* send, int rank, int iter) const {
  const size_t offset = coll_ == Coll::kAllGather ? static_cast<size_t>(rank) * count_ : 0;
  for (size_t j = 0; j < send_count(); ++j) Store(send, j, dtype_, Contribution(rank, offset + j, iter));
}

double Pattern::Expected(int rank, size_t j, int iter) const {
  switch (coll_) {
    case Coll::kAllReduce: {
      double s = 0;
      for (int r = 0; r < nranks_; ++r) s += Contribution(r, j, iter);
      return s;
    }
    case Coll::kReduceScatter: {
      const size_t element = static_cast<size_t>(rank) * count_ + j;
      double s = 0;
      for (int r = 0; r < nranks_; ++r) s += Contribution(r, element, iter);
      return s;
    }
    case Coll::kAllGather: return Contribution(static_cast<int>(j / count_), j, iter);
    case Coll::kBroadcast: return Contribution(root(iter), j, iter);
  }
  return 0;
}

bool Pattern::Contributes(int r, int rank, size_t j, int iter) const {
  switch (coll_) {
    case Coll::kAllReduce: return Contribution(r, j, iter) != 0;
    case Coll::kReduceScatter: return Contribution(r, static_cast<size_t>(rank) * count_ + j, iter) != 0;
    case Coll::kAllGather: return static_cast<size_t>(r) == j / count_;
    case Coll::kBroadcast: return r == root(iter);
  }
  return false;
}

Verdict Pattern::Check(const void* recv, int rank, int iter) const {
  Verdict v;
  v.suspects.assign(nranks_, true);
  const size_t n = recv_count();
  for (size_t j = 0; j < n; ++j) {
    const double want = Expected(rank, j, iter);
    const double got = Load(recv, j, dtype_);
    if (got == want && std::signbit(got) == std::signbit(want)) continue;
    if (v.wrong++ == 0) v.first = absl::StrFormat("element %zu: got %.17g want %.17g", j, got, want);
    for (int r = 0; r < nranks_; ++r) {
      if (v.suspects[r] && !Contributes(r, rank, j, iter)) v.suspects[r] = false;
    }
  }
  if (v.wrong == 0) v.suspects.assign(nranks_, false);
  return v;
}

}  // namespace weft_check
