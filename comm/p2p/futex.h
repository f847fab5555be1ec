// Sleeping on a word of memory shared between processes until another
// process changes it and wakes the sleepers (Linux futexes, not the private
// kind: the word lies in a MAP_SHARED segment that every rank maps).
//
//   // waiter: sleeps only while *word still holds `seen`, at most 2 ms
//   FutexWait(word, seen, std::chrono::milliseconds(2));
//   // waker, after changing *word:
//   FutexWake(word);
#ifndef WEFT_COMM_P2P_FUTEX_H_
#define WEFT_COMM_P2P_FUTEX_H_

#include <chrono>
#include <cstdint>

namespace weft {
namespace p2p {

// Blocks while *word == seen, until woken or for at most `limit`; returns at
// once when *word differs (the kernel compares atomically with going to
// sleep, so a change made just before is never slept through). Spurious
// returns are possible: callers re-check their condition.
void FutexWait(const uint32_t* word, uint32_t seen, std::chrono::microseconds limit);
// Wakes every process sleeping on `word`.
void FutexWake(const uint32_t* word);

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_FUTEX_H_
