// Each host instruction-set version (portable, AVX2, AVX-512: whichever this
// CPU has) against the reference, bit for bit, one run at a time: every
// dtype pair, with and without accumulation and streaming stores, every
// length from 0 to 100 and then some, at many misalignments of source and
// destination within a vector.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/reference/convert.h"
#include "kernels/reference/reference.h"
#include "tests/unit/kernels_test_util.h"

namespace weft {
namespace kernels {
namespace {

using testing::Buffer;
using testing::FillRandom;
using testing::FirstDifference;
using testing::Hex;
using testing::kFloatTypes;

std::vector<const cpu::Isa*> Isas() {
  std::vector<const cpu::Isa*> v = {&cpu::PortableIsa()};
  if (cpu::Avx2Isa() != nullptr) v.push_back(cpu::Avx2Isa());
  if (cpu::Avx512Isa() != nullptr) v.push_back(cpu::Avx512Isa());
  return v;
}

std::vector<size_t> Lengths() {
  std::vector<size_t> v;
  for (size_t n = 0; n <= 100; ++n) v.push_back(n);
  for (size_t n : {255, 256, 257, 1023, 4099, 16384, 16385, 40000}) v.push_back(n);
  return v;
}

TEST(KernelsIsa, ReportsWhatItRuns) {
  for (const cpu::Isa* isa : Isas()) std::printf("host kernel ISA available: %s\n", isa->name);
  std::printf("chosen: %s\n", cpu::BestIsa().name);
  EXPECT_NE(cpu::BestIsa().name, nullptr);
}

TEST(KernelsIsa, ConvertMatchesReference) {
  std::mt19937_64 rng(11);
  for (const cpu::Isa* isa : Isas()) {
    for (DataType st : kFloatTypes) {
      for (DataType dt : kFloatTypes) {
        for (int mode = 0; mode < 3; ++mode) {
          const bool acc = mode == 1, stream = mode == 2;
          for (size_t n : Lengths()) {
            const size_t ms = n % 5, md = (n / 5) % 7;
            Buffer src(st, n, ms), got(dt, n, md);
            FillRandom(src, rng);
            FillRandom(got, rng);
            Buffer want = got;
            const float scale = (n % 3 == 0) ? 1.0f : 0.3f;
            isa->convert(src.data(), st, got.data(), dt, n, scale, acc, stream);
            for (size_t k = 0; k < n; ++k) {
              reference::ConvertElement(src.data(), k, st, want.data(), k, dt, scale, acc);
            }
            const long i = FirstDifference(got, want);
            ASSERT_EQ(i, -1) << isa->name << " " << Name(st) << "->" << Name(dt) << (acc ? " += " : stream ? " = (streaming) " : " = ")
                             << "n=" << n << " scale " << scale << ": element " << i << " is " << Hex(got, i)
                             << ", reference " << Hex(want, i);
          }
        }
      }
    }
  }
}

// The loops Isa::pick resolves ahead are the ones convert runs: the same
// bits, for every pair it resolves, with and without accumulation and
// streaming; float64 pairs are left to convert.
TEST(KernelsIsa, PickedRunsMatchReference) {
  std::mt19937_64 rng(12);
  for (const cpu::Isa* isa : Isas()) {
    for (DataType st : kFloatTypes) {
      for (DataType dt : kFloatTypes) {
        for (int mode = 0; mode < 3; ++mode) {
          const bool acc = mode == 1, stream = mode == 2;
          const cpu::RunFn fn = isa->pick(st, dt, acc, stream);
          const bool wide = st == DataType::kFloat64 || dt == DataType::kFloat64;
          if (fn == nullptr) {
            EXPECT_TRUE(wide || std::string(isa->name) == "portable") << isa->name << " " << Name(st) << "->" << Name(dt);
            continue;
          }
          EXPECT_FALSE(wide);
          for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{100}, size_t{4099}}) {
            Buffer src(st, n, n % 5), got(dt, n, n % 7);
            FillRandom(src, rng);
            FillRandom(got, rng);
            Buffer want = got;
            fn(src.data(), got.data(), n, 0.3f);
            for (size_t k = 0; k < n; ++k) reference::ConvertElement(src.data(), k, st, want.data(), k, dt, 0.3f, acc);
            const long i = FirstDifference(got, want);
            ASSERT_EQ(i, -1) << isa->name << " picked " << Name(st) << "->" << Name(dt) << " mode " << mode << " n=" << n
                             << ": element " << i << " is " << Hex(got, i) << ", reference " << Hex(want, i);
          }
        }
      }
    }
  }
}

// copy_bits moves every bit (signalling NaNs and payloads too) of segments
// of every length around its vector width and its memcpy threshold, at odd
// byte offsets, leaves the bytes around each destination alone, and zeroes
// where the source is NULL.
TEST(KernelsIsa, CopyBitsMovesExactlyTheSegments) {
  std::mt19937_64 rng(13);
  std::vector<size_t> counts;
  for (size_t n = 0; n <= 70; ++n) counts.push_back(n);
  for (size_t n : {127, 128, 129, 1023, 1024, 1025, 2049, 5000}) counts.push_back(n);
  for (const cpu::Isa* isa : Isas()) {
    for (size_t size : {2, 4, 8}) {
      std::vector<unsigned char> src, dst;
      std::vector<Segment> segs;
      std::vector<size_t> at;  // where segment k starts in dst
      size_t s_end = 0, d_end = 0;
      for (size_t k = 0; k < counts.size(); ++k) {
        s_end += size * (1 + k % 3);  // odd element offsets between segments
        d_end += size * (1 + k % 5);
        segs.push_back({reinterpret_cast<void*>(s_end), DataType::kFloat32, reinterpret_cast<void*>(d_end),
                        DataType::kFloat32, counts[k]});
        at.push_back(d_end);
        s_end += counts[k] * size;
        d_end += counts[k] * size;
      }
      src.resize(s_end + 64);
      dst.resize(d_end + 64);
      for (unsigned char& b : src) b = static_cast<unsigned char>(rng());
      for (unsigned char& b : dst) b = static_cast<unsigned char>(rng());
      std::vector<unsigned char> want = dst;
      for (size_t k = 0; k < segs.size(); ++k) {
        const bool zero = k % 11 == 7;
        unsigned char* from = src.data() + reinterpret_cast<uintptr_t>(segs[k].src);
        unsigned char* to = dst.data() + at[k];
        if (zero) {
          std::fill_n(want.data() + at[k], counts[k] * size, 0);
        } else {
          std::memcpy(want.data() + at[k], from, counts[k] * size);
        }
        segs[k].src = zero ? nullptr : from;
        segs[k].dst = to;
      }
      isa->copy_bits(segs.data(), segs.size(), size);
      ASSERT_EQ(dst, want) << isa->name << " element size " << size;
    }
  }
}

TEST(KernelsIsa, ZeroFillWritesPositiveZeros) {
  for (const cpu::Isa* isa : Isas()) {
    for (DataType dt : kFloatTypes) {
      Buffer got(dt, 37, 1);
      got.Poison();
      isa->convert(nullptr, DataType::kFloat32, got.data(), dt, 37, 0.5f, false, false);
      Buffer zero(dt, 37, 0);
      std::memset(zero.data(), 0, zero.bytes());
      EXPECT_EQ(FirstDifference(got, zero), -1) << isa->name << " " << Name(dt);
    }
  }
}

TEST(KernelsIsa, UnscaleMatchesReference) {
  std::mt19937_64 rng(12);
  for (const cpu::Isa* isa : Isas()) {
    for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16}) {
      for (size_t n : Lengths()) {
        for (float inv : {0.5f, 1.0f / 65536.0f, 4096.0f}) {
          Buffer got(t, n, n % 3);
          FillRandom(got, rng);
          // Half the runs without specials, so "no inf found" is exercised too.
          if (n % 2 == 0) {
            for (size_t k = 0; k < n; ++k) {
              if (!std::isfinite(reference::LoadFloat(got.data(), k, t))) reference::StoreFloat(got.data(), k, t, 1.5f);
            }
          }
          Buffer want = got;
          const bool found = isa->unscale(got.data(), t, n, inv);
          int want_found = 0;
          TensorRef ref = want.ref();
          reference::UnscaleCheckFinite({&ref, 1}, inv, &want_found);
          ASSERT_EQ(FirstDifference(got, want), -1) << isa->name << " " << Name(t) << " n=" << n << " inv " << inv;
          ASSERT_EQ(found, want_found == 1) << isa->name << " " << Name(t) << " n=" << n << " inv " << inv;
        }
      }
    }
  }
}

TEST(KernelsIsa, NormBlockMatchesReference) {
  std::mt19937_64 rng(13);
  for (const cpu::Isa* isa : Isas()) {
    for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16}) {
      for (size_t n : Lengths()) {
        if (n > kNormBlock) continue;
        Buffer x(t, n, n % 4);
        FillRandom(x, rng);
        // Finite values, or every sum would be inf or NaN.
        for (size_t k = 0; k < n; ++k) {
          if (!std::isfinite(reference::LoadFloat(x.data(), k, t))) reference::StoreFloat(x.data(), k, t, -3.25f);
        }
        TensorRef ref = x.ref();
        float want_norm = 0, want_total = 0;
        reference::L2Norm({&ref, 1}, &want_norm, &want_total);
        const double sum = isa->block_sum_of_squares(x.data(), t, n);
        const float got = static_cast<float>(std::sqrt(sum));
        ASSERT_EQ(FloatBits(got), FloatBits(want_norm)) << isa->name << " " << Name(t) << " n=" << n;
      }
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace weft
