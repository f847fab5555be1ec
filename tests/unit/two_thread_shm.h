// Two ranks of one process (threads) meeting through a real shared-memory
// segment (comm/p2p/shm.h); the bootstrap's collectives are a thread
// barrier over one board. For unit tests of NodeShm without a launcher.
#ifndef WEFT_TESTS_UNIT_TWO_THREAD_SHM_H_
#define WEFT_TESTS_UNIT_TWO_THREAD_SHM_H_

#include <algorithm>
#include <barrier>
#include <cstring>
#include <vector>

#include "comm/p2p/shm.h"

namespace weft {
namespace p2p {

struct TwoThreadBootstrap {
  std::barrier<> sync{2};
  std::vector<unsigned char> board = std::vector<unsigned char>(256);
  int mins[2] = {0, 0};

  ShmBootstrap For(int rank) {
    ShmBootstrap b;
    b.all_on_one_node = [] { return absl::StatusOr<bool>(true); };
    b.broadcast = [this, rank](void* bytes, size_t n) {
      if (rank == 0) std::memcpy(board.data(), bytes, n);
      sync.arrive_and_wait();
      if (rank != 0) std::memcpy(bytes, board.data(), n);
      sync.arrive_and_wait();
      return absl::OkStatus();
    };
    b.all_min = [this, rank](int* v) {
      mins[rank] = *v;
      sync.arrive_and_wait();
      *v = std::min(mins[0], mins[1]);
      sync.arrive_and_wait();
      return absl::OkStatus();
    };
    return b;
  }
};

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_TESTS_UNIT_TWO_THREAD_SHM_H_
