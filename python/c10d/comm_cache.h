// The weft communicators of one torch process group, made from its Store.
//
// torch hands every process group a Store with a prefix of its own (the
// default group's, a new_group's, a DeviceMesh dimension's); weft's
// weftCommInitStore moves its bootstrap id through that store, so each group
// gets a communicator of its own and no two groups' keys meet.
//
//   CommCache comms(store, rank, size, timeout);
//   weftComm_t host = comms.Host();          // made by the constructor
//   weftComm_t dev = comms.Cuda(device);     // made by the first CUDA op
//
// The host communicator is made when the group is (so a rank that never
// arrives fails init_process_group, as gloo does); the CUDA one lazily, by
// the first collective on a CUDA tensor, which every rank of the group issues
// in the same order. Only weft.h is used: this is a framework plugging into
// weft through its C ABI.
#ifndef WEFT_PYTHON_C10D_COMM_CACHE_H_
#define WEFT_PYTHON_C10D_COMM_CACHE_H_

#include <chrono>
#include <mutex>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "weft/weft.h"

namespace weft_c10d {

// The error text of a failed weft call made on this thread: the op, the
// rank and weftGetLastError(), as every exception of the backend reads.
std::string WeftError(const char* op, int rank, weftResult_t r);

class CommCache {
 public:
  CommCache(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout);
  ~CommCache();  // destroys the communicators (Destroy first, to see its errors)
  CommCache(const CommCache&) = delete;
  CommCache& operator=(const CommCache&) = delete;

  weftComm_t Host() const { return host_; }
  // The communicator for CUDA memory on `device`, made on first use (a
  // collective over the group). A group drives one device per process.
  weftComm_t Cuda(int device);
  int cuda_device() const { return cuda_device_; }

  int timeout_ms() const { return timeout_ms_; }
  // The group's store (its prefix torch's): where a split makes its children meet.
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  void Abort();    // any thread: every waiting and later collective fails
  void Destroy();  // frees both communicators; later calls fail

 private:
  weftComm_t Make(const char* what, weftMemoryKind_t memory, int device);
  std::string Generation(const char* what);  // which making of `what` in this store this is

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int size_;
  int timeout_ms_;
  std::mutex mu_;
  weftComm_t host_ = nullptr;
  weftComm_t cuda_ = nullptr;
  int cuda_device_ = -1;
  bool destroyed_ = false;
};

}  // namespace weft_c10d

#endif  // WEFT_PYTHON_C10D_COMM_CACHE_H_
