#include "bench/check/heartbeat.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/check/beat_channel.h"
#include "core/status.h"

namespace weft_check {

namespace {

// Tabs and newlines separate fields: keep them out of values.
std::string Clean(std::string s) {
  for (char& c : s) {
    if (c == '\t' || c == '\n') c = ' ';
  }
  return s;
}

}  // namespace

std::string BeatPath(const std::string& dir, int rank) { return absl::StrFormat("%s/rank-%d.beat", dir, rank); }

// A heartbeat of rank `rank` that has written its first line (to a file
// when `link` is null) and not yet started its thread.
std::unique_ptr<Heartbeat> Heartbeat::Make(const std::string& path, std::unique_ptr<BeatLink> link, int rank,
                                           const std::string& node, const std::string& device) {
  std::unique_ptr<Heartbeat> h(new Heartbeat);
  h->path_ = path;
  h->link_ = std::move(link);
  h->beat_.found = true;
  h->beat_.rank = rank;
  h->beat_.node = Clean(node);
  h->beat_.device = Clean(device);
  h->beat_.state = "running";
  h->Write();
  return h;
}

absl::StatusOr<std::unique_ptr<Heartbeat>> Heartbeat::Start(const std::string& dir, int rank, const std::string& node,
                                                            const std::string& device) {
  std::unique_ptr<Heartbeat> h = Make(BeatPath(dir, rank), nullptr, rank, node, device);
  std::ifstream probe(h->path_);
  if (!probe) {
    return weft::SystemError("--heartbeat %s: rank %d cannot write %s (every rank needs a directory it can write; "
                             "on several nodes, one on a shared filesystem)", dir, rank, h->path_);
  }
  h->thread_ = std::thread([p = h.get()] { p->Loop(); });
  return h;
}

absl::StatusOr<std::unique_ptr<Heartbeat>> Heartbeat::Start(std::unique_ptr<BeatLink> link, int rank,
                                                            const std::string& node, const std::string& device) {
  std::unique_ptr<Heartbeat> h = Make("", std::move(link), rank, node, device);
  h->thread_ = std::thread([p = h.get()] { p->Loop(); });
  return h;
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  Write();
}

void Heartbeat::Enter(long long seq, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  beat_.entered = seq;
  beat_.current = what;
  dirty_ = true;
}

void Heartbeat::Complete(long long seq) {
  std::lock_guard<std::mutex> lock(mu_);
  beat_.completed = seq;
  beat_.last = std::move(beat_.current);
  beat_.current.clear();
  dirty_ = true;
}

void Heartbeat::SetState(const std::string& state) {
  std::lock_guard<std::mutex> lock(mu_);
  beat_.state = Clean(state);
  dirty_ = true;
}

void Heartbeat::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(kPeriodMs));
    if (!dirty_) continue;
    lock.unlock();
    Write();
    lock.lock();
  }
}

// Written whole to a temporary and renamed, so a reader never sees half a line.
void Heartbeat::Write() {
  std::string line;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Beat& b = beat_;
    line = absl::StrFormat("%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", b.rank, b.node, b.device, b.entered, b.completed,
                           Clean(b.current), Clean(b.last), b.state);
    dirty_ = false;
  }
  if (link_ != nullptr) return link_->Send(line);
  const std::string tmp = path_ + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return;  // the reader reports the file missing
  std::fputs(line.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path_.c_str());
}

bool ParseBeat(const std::string& line, int rank, Beat* out) {
  const std::vector<std::string> f = absl::StrSplit(line, '\t');
  Beat b;
  if (f.size() != 8 || !absl::SimpleAtoi(f[0], &b.rank) || b.rank != rank || !absl::SimpleAtoi(f[3], &b.entered) ||
      !absl::SimpleAtoi(f[4], &b.completed)) {
    return false;
  }
  b.found = true;
  b.node = f[1];
  b.device = f[2];
  b.current = f[5];
  b.last = f[6];
  b.state = f[7];
  *out = b;
  return true;
}

std::vector<Beat> ReadBeats(const std::string& dir, int nranks) {
  std::vector<Beat> out(nranks);
  for (int r = 0; r < nranks; ++r) {
    out[r].rank = r;
    std::ifstream in(BeatPath(dir, r));
    std::string line;
    if (in && std::getline(in, line)) ParseBeat(line, r, &out[r]);
  }
  return out;
}

}  // namespace weft_check
