#include "comm/p2p/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace weft {
namespace p2p {

void FutexWait(const uint32_t* word, uint32_t seen, std::chrono::microseconds limit) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(limit);
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(s.count());
  ts.tv_nsec = static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(limit - s).count());
  // EAGAIN (the word changed), EINTR and ETIMEDOUT all mean: look again.
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void FutexWake(const uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

}  // namespace p2p
}  // namespace weft
