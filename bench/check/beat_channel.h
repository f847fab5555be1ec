// The heartbeat's way between nodes that share no filesystem: rank 0 keeps
// a TCP listener (BeatServer) and every rank's heartbeat thread sends it
// its beat line (heartbeat.h) whenever the line changes. It needs nothing
// of weft's, so it still speaks when weft's collectives hang; after a hang
// rank 0 reads every rank's latest line from memory.
//
//   rank 0: ASSIGN_OR_RETURN(auto server, BeatServer::Start());  // then share server->address()
//   every rank: ASSIGN_OR_RETURN(auto link, BeatLink::Connect(address, 5000));
//               link->Send(line);   ... rank 0, after a hang: server->Beats(nranks)
#ifndef WEFT_BENCH_CHECK_BEAT_CHANNEL_H_
#define WEFT_BENCH_CHECK_BEAT_CHANNEL_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/check/heartbeat.h"

namespace weft_check {

class BeatServer {
 public:
  // Listens on every interface, on a port the kernel chooses.
  static absl::StatusOr<std::unique_ptr<BeatServer>> Start();
  ~BeatServer();
  // "tcp:A1,A2,...:PORT": this host's IPv4 addresses, loopback last, for
  // BeatLink::Connect to try in turn.
  const std::string& address() const { return address_; }
  // Every rank's latest beat (found = false where none arrived).
  std::vector<Beat> Beats(int nranks) const;

 private:
  BeatServer() = default;
  void Loop();

  int listener_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor ends Loop through it
  std::string address_;
  mutable std::mutex mu_;
  std::map<int, std::string> lines_;  // by rank
  std::thread thread_;
};

class BeatLink {
 public:
  // Tries each address of `address` (BeatServer::address) until one takes
  // the connection, each for at most `timeout_ms`.
  static absl::StatusOr<std::unique_ptr<BeatLink>> Connect(const std::string& address, int timeout_ms);
  ~BeatLink();
  // One newline-terminated line. A server that is gone is not an error:
  // the heartbeat only informs rank 0's report.
  void Send(const std::string& line);

 private:
  BeatLink() = default;
  int fd_ = -1;
};

bool IsBeatAddress(const std::string& s);

}  // namespace weft_check

#endif  // WEFT_BENCH_CHECK_BEAT_CHANNEL_H_
