// What the checks of tests/common fill receive buffers with, and the one
// random mix they draw payloads from, shared so that every check poisons
// and draws alike.
#ifndef WEFT_TESTS_COMMON_POISON_H_
#define WEFT_TESTS_COMMON_POISON_H_

#include <cstdint>

namespace weft {
namespace testing {

// What receive buffers are filled with before a call: NaN in every float
// type, -1 in the signed integers.
inline constexpr unsigned char kPoison = 0xff;

// splitmix64's finaliser.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_COMMON_POISON_H_
