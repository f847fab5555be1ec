#include "comm/p2p/shm.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "comm/p2p/futex.h"
#include "core/env.h"
#include "core/reduce.h"
#include "core/status.h"

namespace weft {
namespace p2p {
namespace {

// Each rank's region: a page of control (its barrier flag, in a cache line
// of its own but for the fingerprint of the call it is in, so polling peers
// never contend with its data), then the staging buffers. The control
// page's cache lines: 0 the flag and the call's fingerprint, 1 the ready
// words, 2 the process id, 3 the progress the hang watch reads (hang.h),
// 4 the count of peers sleeping on the flag (futex.h).
constexpr size_t kPage = 4096;
constexpr size_t kControl = kPage;
// Chunks of a round start at multiples of this many elements, so the ranks
// reducing neighbouring chunks never write one cache line.
constexpr size_t kChunkQuantum = 64;
constexpr size_t kNameBytes = 64;

size_t PageAlign(size_t n) { return (n + kPage - 1) / kPage * kPage; }
// Three staging buffers per rank: a round's buffer is written again three
// rounds later, after the barriers that order every read of it.
constexpr size_t kBuffers = 3;

size_t Stride(size_t round_bytes) { return kControl + kBuffers * PageAlign(round_bytes); }

// First element of chunk c of a round of n elements split over `size` ranks.
size_t ChunkBegin(size_t n, int c, int size) {
  const size_t units = (n + kChunkQuantum - 1) / kChunkQuantum;
  return std::min(n, units * static_cast<size_t>(c) / static_cast<size_t>(size) * kChunkQuantum);
}

std::atomic_ref<uint64_t> Flag(void* region) { return std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(region)); }

// Each rank's fingerprint of its current call (check.h), in the flag's cache
// line, which its peers read anyway to pass the barrier that follows: two
// sets used in turn, as the ready words are (a rank writes set p again only
// after every peer has passed the next call's first barrier).
std::atomic_ref<uint64_t> CallWord(void* region, uint64_t call, size_t i) {
  auto* words = reinterpret_cast<uint64_t*>(static_cast<unsigned char*>(region) + sizeof(uint64_t));
  return std::atomic_ref<uint64_t>(words[(call % 2) * kCallWords + i]);
}

// AllReduceReady's words {offer, reduced, upto}, in the control page's
// second cache line, two sets used in turn: a rank writes set p again only
// in the call after next, and it cannot get there before every peer has
// passed the next call's barrier, long after reading set p.
constexpr size_t kReadyWords = 3;
std::atomic_ref<uint64_t> ReadyWord(void* region, uint64_t call, size_t i) {
  auto* words = reinterpret_cast<uint64_t*>(static_cast<unsigned char*>(region) + 64);
  return std::atomic_ref<uint64_t>(words[(call % 2) * kReadyWords + i]);
}

// The low half of a flag, which a peer sleeping on it (kBlock) hands to the
// futex: epochs grow by one per barrier, so a waiter that saw epoch e - 1
// sleeps while the low half still reads that.
const uint32_t* FlagLow(void* region) {
  return reinterpret_cast<const uint32_t*>(static_cast<unsigned char*>(region)) +
         (std::endian::native == std::endian::little ? 0 : 1);
}

// How many peers sleep on this rank's flag, in its control page's fifth
// cache line (written only by sleepers): the rank raising its flag makes the
// wake-up system call only when someone sleeps, so kSpin and kYield, and
// kBlock ranks that arrive together, pay for none.
std::atomic_ref<uint32_t> SleepersWord(void* region) {
  return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(static_cast<unsigned char*>(region) + 256));
}

// Each rank's process id, in its control page's third cache line: a rank
// that times out waiting for a peer checks whether that process still exists.
std::atomic_ref<int64_t> PidWord(void* region) {
  return std::atomic_ref<int64_t>(*reinterpret_cast<int64_t*>(static_cast<unsigned char*>(region) + 128));
}

// Each rank's progress (hang.h), in its control page's fourth cache line:
// written by its own collective's thread, read only by a peer's hang report.
ProgressWords* ProgressPage(void* region) {
  return reinterpret_cast<ProgressWords*>(static_cast<unsigned char*>(region) + 192);
}

// Peers on this node: their progress straight from their pages; a peer is
// dead when its pid no longer exists (the segment outlives a killed rank).
class ShmBoard final : public Board {
 public:
  ShmBoard(const NodeShm& shm, std::vector<pid_t> pids) : shm_(shm), pids_(std::move(pids)) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    host_ = host;
  }
  PeerState Peer(int q) override {
    PeerState p;
    p.where = Where(q);
    if (Dead(q, &p.why)) {
      p.kind = PeerState::kDead;
      return p;
    }
    p.kind = PeerState::kKnown;
    p.progress = ReadProgress(*shm_.ProgressOf(q));
    return p;
  }
  bool Dead(int q, std::string* why) override {
    const pid_t pid = pids_[static_cast<size_t>(q)];
    if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) return false;
    *why = "its process has exited";
    return true;
  }
  std::string Where(int q) const override {
    return absl::StrFormat("pid %d on node %s", static_cast<int>(pids_[static_cast<size_t>(q)]), host_);
  }

 private:
  const NodeShm& shm_;
  const std::vector<pid_t> pids_;
  std::string host_;
};

// Creates, sizes and maps a fresh segment (rank 0); its name goes in
// `name`, which is left empty when there is none.
absl::StatusOr<void*> CreateSegment(size_t bytes, char (&name)[kNameBytes]) {
  static std::atomic<unsigned> serial{0};
  int fd = -1;
  // The name only has to be new on this node: pid and a serial make it so,
  // unless a dead process with a recycled pid left one behind (O_EXCL).
  for (int attempt = 0; fd < 0 && attempt < 16; ++attempt) {
    std::snprintf(name, kNameBytes, "/weft-%d-%u", static_cast<int>(getpid()), serial++);
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    const absl::Status s = SystemError("shm_open(%s) failed: %s", name, std::strerror(errno));
    name[0] = '\0';
    return s;
  }
  // Reserve the pages now: a full /dev/shm is then an error here, not a
  // SIGBUS at the first write to an unbacked page.
  int rc = ftruncate(fd, static_cast<off_t>(bytes));
  if (rc == 0) rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  else rc = errno;
  void* p = rc == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (rc == 0 && p == MAP_FAILED) rc = errno;
  close(fd);
  if (rc != 0) {
    shm_unlink(name);
    const absl::Status s =
        SystemError("cannot allocate %zu bytes of shared memory in %s: %s", bytes, name, std::strerror(rc));
    name[0] = '\0';
    return s;
  }
  return p;
}

absl::StatusOr<void*> MapSegment(const char* name, size_t bytes) {
  const int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0) return SystemError("shm_open(%s) failed: %s", name, std::strerror(errno));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) return SystemError("mmap of %s (%zu bytes) failed: %s", name, bytes, std::strerror(err));
  return p;
}

}  // namespace

template <typename SrcFn>
void NodeShm::Reduce(DataType t, RedOp op, SrcFn src, size_t n, void* out) {
  ReduceBlocked(t, op, size_, src, n, out);
}

absl::StatusOr<std::unique_ptr<NodeShm>> NodeShm::Create(int rank, int size, size_t round_bytes,
                                                         const ShmBootstrap& bootstrap) {
  if (size < 2 || !Env::Get().shm) return std::unique_ptr<NodeShm>();
  ASSIGN_OR_RETURN(const bool local, bootstrap.all_on_one_node());
  if (!local) return std::unique_ptr<NodeShm>();
  // A reduce-scatter round stages one element of the widest type per rank at least.
  round_bytes = std::max(round_bytes, static_cast<size_t>(size) * sizeof(double));
  const size_t bytes = Stride(round_bytes) * static_cast<size_t>(size);

  // Rank 0 creates the segment and sends its name ("" when it could not).
  char name[kNameBytes] = {};
  void* base = nullptr;
  absl::Status local_error;
  if (rank == 0) {
    absl::StatusOr<void*> p = CreateSegment(bytes, name);
    if (p.ok()) base = *p;
    else local_error = p.status();
  }
  RETURN_IF_ERROR(Annotate(bootstrap.broadcast(name, kNameBytes), "sharing the shared-memory segment's name"));
  if (rank != 0 && name[0] != '\0') {
    absl::StatusOr<void*> p = MapSegment(name, bytes);
    if (p.ok()) base = *p;
    else local_error = p.status();
  }

  // Use the segment only if every rank mapped it; after this all have
  // tried, so rank 0 can unlink the name.
  if (base != nullptr) {
    PidWord(static_cast<unsigned char*>(base) + Stride(round_bytes) * static_cast<size_t>(rank))
        .store(getpid(), std::memory_order_relaxed);  // the agreement below publishes it
  }
  int ok = base != nullptr ? 1 : 0;
  absl::Status agreed = Annotate(bootstrap.all_min(&ok), "agreeing on the shared-memory segment");
  if (rank == 0 && name[0] != '\0') shm_unlink(name);
  if (!agreed.ok() || ok == 0) {
    if (base != nullptr) munmap(base, bytes);
    RETURN_IF_ERROR(agreed);
    if (!local_error.ok()) {
      Log(LogLevel::kWarn, "rank %d: no shared-memory collectives, using point-to-point: %s", rank,
          local_error.message());
    }
    return std::unique_ptr<NodeShm>();
  }
  Log(LogLevel::kInfo, "rank %d of %d: shared-memory collectives, %zu-byte rounds", rank, size, round_bytes);
  return std::unique_ptr<NodeShm>(new NodeShm(rank, size, round_bytes, base, bytes));
}

NodeShm::NodeShm(int rank, int size, size_t round_bytes, void* base, size_t mapped)
    : rank_(rank), size_(size), round_bytes_(round_bytes), base_(base), mapped_(mapped), check_(CheckCalls()) {}

NodeShm::~NodeShm() { munmap(base_, mapped_); }

unsigned char* NodeShm::Buf(int q, uint64_t round) const {
  auto* region = static_cast<unsigned char*>(base_) + Stride(round_bytes_) * static_cast<size_t>(q);
  return region + kControl + (round % kBuffers) * PageAlign(round_bytes_);
}

// A wait for rank q ended with `s`. A timeout whose peer's process no longer
// exists says so: that is no mismatch of calls, and waiting longer cannot help.
absl::Status NodeShm::PeerGone(void* region, int q, const absl::Status& s) const {
  const auto pid = static_cast<pid_t>(PidWord(region).load(std::memory_order_relaxed));
  if (absl::IsDeadlineExceeded(s) && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
    return RemoteError("rank %d: rank %d (pid %d on this node) has exited; this collective cannot complete", rank_,
                       q, static_cast<int>(pid));
  }
  return Annotate(s, absl::StrFormat("waiting for rank %d at a shared-memory barrier", q));
}

absl::Status NodeShm::Meet(const Call& call, const Patience& w, absl::FunctionRef<void()> meanwhile) {
  if (!check_) return FlagBarrier(w, meanwhile);
  const uint64_t n = calls_++;
  const Call mine = Stamp(call, n);
  const size_t stride = Stride(round_bytes_);
  auto* base = static_cast<unsigned char*>(base_);
  for (size_t i = 0; i < kCallWords; ++i) {
    CallWord(base + stride * static_cast<size_t>(rank_), n, i).store(mine.words[i], std::memory_order_relaxed);
  }
  RETURN_IF_ERROR(FlagBarrier(w, meanwhile));  // its release and acquire order the words
  if (size_ == 2) {  // the common case, without the indirection
    Call other;
    for (size_t i = 0; i < kCallWords; ++i) {
      other.words[i] = CallWord(base + stride * static_cast<size_t>(1 - rank_), n, i).load(std::memory_order_relaxed);
    }
    if (other.words[0] == mine.words[0] && other.words[1] == mine.words[1] && other.words[2] == mine.words[2]) {
      return absl::OkStatus();
    }
  }
  return Decide(rank_, size_, [&](int q) {
    Call c;
    for (size_t i = 0; i < kCallWords; ++i) {
      c.words[i] = CallWord(base + stride * static_cast<size_t>(q), n, i).load(std::memory_order_relaxed);
    }
    return c;
  });
}

absl::Status NodeShm::Check(const Call& call, const Patience& w) { return Meet(call, w); }

ProgressWords* NodeShm::ProgressOf(int q) const {
  return ProgressPage(static_cast<unsigned char*>(base_) + Stride(round_bytes_) * static_cast<size_t>(q));
}

std::unique_ptr<Board> NodeShm::MakeBoard() const {
  std::vector<pid_t> pids(static_cast<size_t>(size_));
  for (int q = 0; q < size_; ++q) {
    auto* region = static_cast<unsigned char*>(base_) + Stride(round_bytes_) * static_cast<size_t>(q);
    pids[static_cast<size_t>(q)] = static_cast<pid_t>(PidWord(region).load(std::memory_order_relaxed));
  }
  return std::make_unique<ShmBoard>(*this, std::move(pids));
}

absl::Status NodeShm::Barrier(const Patience& w) { return Meet(MakeCall(CallKind::kBarrier, DataType::kUint8, 0), w); }

absl::Status NodeShm::FlagBarrier(const Patience& w, absl::FunctionRef<void()> meanwhile) {
  ++epoch_;
  const size_t stride = Stride(round_bytes_);
  auto* base = static_cast<unsigned char*>(base_);
  unsigned char* mine = base + stride * static_cast<size_t>(rank_);
  Flag(mine).store(epoch_, std::memory_order_release);
  // Either a sleeper's count is seen here or its re-check (below) sees the
  // new flag: a store, a full fence, then a load, on both sides.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (SleepersWord(mine).load(std::memory_order_relaxed) != 0) FutexWake(FlagLow(mine));
  meanwhile();
  Backoff backoff(w);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    unsigned char* region = base + stride * static_cast<size_t>(q);
    std::atomic_ref<uint64_t> flag = Flag(region);
    const auto sleep = [&](std::chrono::microseconds limit) {
      std::atomic_ref<uint32_t> sleepers = SleepersWord(region);
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint64_t seen = flag.load(std::memory_order_seq_cst);
      if (seen < epoch_) FutexWait(FlagLow(region), static_cast<uint32_t>(seen), limit);
      sleepers.fetch_sub(1, std::memory_order_seq_cst);
    };
    while (flag.load(std::memory_order_acquire) < epoch_) {
      absl::Status s = backoff.Idle(sleep);
      if (!s.ok()) return PeerGone(region, q, s);
    }
    backoff.Progress();
  }
  return absl::OkStatus();
}

absl::Status NodeShm::AllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op,
                                const Patience& w) {
  const size_t es = ElementSize(t);
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  return AllReduceRounds(
      MakeCall(CallKind::kAllReduce, t, count, op), count, t, op, w, in,
      [&](size_t off, size_t n, unsigned char* dst) { std::memcpy(dst, in + off * es, n * es); },
      [&](const unsigned char* src, size_t off, size_t n) { std::memcpy(out + off * es, src, n * es); });
}

absl::StatusOr<size_t> NodeShm::AllReduceReady(void* data, size_t reduced, size_t offer, size_t upto, DataType t,
                                                RedOp op, const Patience& w) {
  const size_t stride = Stride(round_bytes_);
  auto* base = static_cast<unsigned char*>(base_);
  const uint64_t call = ready_calls_++;
  const uint64_t mine[kReadyWords] = {offer, reduced, upto};
  for (size_t i = 0; i < kReadyWords; ++i) {
    ReadyWord(base + stride * static_cast<size_t>(rank_), call, i).store(mine[i], std::memory_order_relaxed);
  }
  // The barrier's release and acquire order the words.
  RETURN_IF_ERROR(Meet(MakeCall(CallKind::kAllReduceReady, t, 0, op), w));
  uint64_t least = offer;
  for (int q = 0; q < size_; ++q) {
    unsigned char* region = base + stride * static_cast<size_t>(q);
    const uint64_t r = ReadyWord(region, call, 1).load(std::memory_order_relaxed);
    const uint64_t u = ReadyWord(region, call, 2).load(std::memory_order_relaxed);
    if (r != reduced || u != upto) {
      // Every rank finds a rank that differs from it, so all fail alike,
      // at the same barrier and before any round.
      return InvalidUsage("the ranks called all_reduce_ready at different points: rank %d from element %d up to %d, "
                          "rank %d from %d up to %d", rank_, reduced, upto, q, r, u);
    }
    least = std::min(least, ReadyWord(region, call, 0).load(std::memory_order_relaxed));
  }
  auto* from = static_cast<unsigned char*>(data) + reduced * ElementSize(t);
  RETURN_IF_ERROR(AllReduce(from, from, least - reduced, t, op, w));
  return static_cast<size_t>(least);
}

// Gaps between pieces are staged as zeros: nobody reads their results, but
// garbage there could be a signalling NaN or an integer overflow to reduce.
absl::Status NodeShm::AllReducePieces(const std::vector<Piece>& pieces, DataType t, RedOp op, const Patience& w) {
  const size_t es = ElementSize(t), count = pieces.back().offset + pieces.back().count;
  // The first piece ending after `off`; every call walks forward from there.
  auto first = [&](size_t off) {
    return std::partition_point(pieces.begin(), pieces.end(),
                                [off](const Piece& p) { return p.offset + p.count <= off; });
  };
  auto read = [&](size_t off, size_t n, unsigned char* dst) {
    size_t at = off;
    for (auto p = first(off); p != pieces.end() && p->offset < off + n; ++p) {
      const size_t lo = std::max(off, p->offset), hi = std::min(off + n, p->offset + p->count);
      std::memset(dst + (at - off) * es, 0, (lo - at) * es);
      std::memcpy(dst + (lo - off) * es, static_cast<const unsigned char*>(p->send) + (lo - p->offset) * es,
                  (hi - lo) * es);
      at = hi;
    }
    std::memset(dst + (at - off) * es, 0, (off + n - at) * es);
  };
  auto write = [&](const unsigned char* src, size_t off, size_t n) {
    for (auto p = first(off); p != pieces.end() && p->offset < off + n; ++p) {
      const size_t lo = std::max(off, p->offset), hi = std::min(off + n, p->offset + p->count);
      std::memcpy(static_cast<unsigned char*>(p->recv) + (lo - p->offset) * es, src + (lo - off) * es,
                  (hi - lo) * es);
    }
  };
  return AllReduceRounds(MakeCall(CallKind::kAllReduce, t, count, op), count, t, op, w, nullptr, read, write);
}

absl::Status NodeShm::AllReduceRounds(const Call& call, size_t count, DataType t, RedOp op, const Patience& w,
                                      const unsigned char* direct,
                                      absl::FunctionRef<void(size_t, size_t, unsigned char*)> read,
                                      absl::FunctionRef<void(const unsigned char*, size_t, size_t)> write) {
  const size_t es = ElementSize(t), per_round = std::max<size_t>(round_bytes_ / es, 1);
  const size_t rounds = (count + per_round - 1) / per_round;
  const uint64_t first = round_;
  round_ += rounds;
  auto len = [&](size_t k) { return std::min(per_round, count - k * per_round); };
  // Only rank c reads chunk c, so with a direct input this rank's own chunk
  // is read where it is, never staged.
  auto copy_in = [&](size_t k) {
    const size_t n = len(k), b = ChunkBegin(n, rank_, size_), e = ChunkBegin(n, rank_ + 1, size_);
    unsigned char* buf = Buf(rank_, first + k);
    const size_t at = k * per_round;
    if (direct == nullptr) {
      read(at, n, buf);
      return;
    }
    read(at, b, buf);
    read(at + e, n - e, buf + e * es);
  };
  // Pipelined so that one barrier per round suffices: at barrier k, round
  // k is reduced (everyone may copy it out) and round k+1 is staged
  // (everyone may reduce it).
  copy_in(0);
  RETURN_IF_ERROR(Meet(call, w));
  for (size_t k = 0; k < rounds; ++k) {
    // Chunk c's result goes into rank c's own buffer, at chunk c: a slot
    // nobody staged into (with a direct input) or this rank's own staged
    // input, which only it reads, and reads before writing. This rank copies
    // it out while it waits for the others at the barrier (it is still in
    // this core's cache), every other rank after the barrier, each chunk
    // from the rank that reduced it.
    const size_t n = len(k), b = ChunkBegin(n, rank_, size_), e = ChunkBegin(n, rank_ + 1, size_);
    const uint64_t g = first + k;
    const unsigned char* own = direct != nullptr ? direct + (k * per_round + b) * es : Buf(rank_, g) + b * es;
    auto src = [&](int q) -> const void* { return q == rank_ ? own : Buf(q, g) + b * es; };
    if (e > b) Reduce(t, op, src, e - b, Buf(rank_, g) + b * es);
    if (k + 1 < rounds) copy_in(k + 1);
    RETURN_IF_ERROR(FlagBarrier(w, [&] {
      if (e > b) write(Buf(rank_, g) + b * es, k * per_round + b, e - b);
    }));
    for (int q = 0; q < size_; ++q) {
      const size_t qb = ChunkBegin(n, q, size_), qe = ChunkBegin(n, q + 1, size_);
      if (q != rank_ && qe > qb) write(Buf(q, g) + qb * es, k * per_round + qb, qe - qb);
    }
  }
  return absl::OkStatus();
}

absl::Status NodeShm::ReduceScatter(const void* send, void* recv, size_t recvcount, DataType t, RedOp op,
                                    const Patience& w) {
  const size_t es = ElementSize(t), nr = static_cast<size_t>(size_);
  const size_t per_round = std::max<size_t>(round_bytes_ / es / nr, 1);
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  for (size_t off = 0; off < recvcount; off += per_round) {
    const size_t n = std::min(per_round, recvcount - off);
    const uint64_t g = round_++;
    // This rank's own block is read from `send` where it is, unless the
    // output lies over it (in place), where Reduce may write before reading.
    const unsigned char* own = in + (static_cast<size_t>(rank_) * recvcount + off) * es;
    const bool stage_own = own == out + off * es;
    for (size_t c = 0; c < nr; ++c) {
      if (c == static_cast<size_t>(rank_) && !stage_own) continue;
      std::memcpy(Buf(rank_, g) + c * n * es, in + (c * recvcount + off) * es, n * es);
    }
    RETURN_IF_ERROR(off == 0 ? Meet(MakeCall(CallKind::kReduceScatter, t, recvcount, op), w) : FlagBarrier(w));
    const size_t mine = static_cast<size_t>(rank_) * n * es;
    auto src = [&](int q) -> const void* { return q == rank_ && !stage_own ? own : Buf(q, g) + mine; };
    Reduce(t, op, src, n, out + off * es);
  }
  return absl::OkStatus();
}

absl::Status NodeShm::AllGather(const void* send, void* recv, size_t sendcount, DataType t, const Patience& w) {
  const size_t es = ElementSize(t), per_round = std::max<size_t>(round_bytes_ / es, 1);
  const size_t rounds = (sendcount + per_round - 1) / per_round;
  const uint64_t first = round_;
  round_ += rounds;
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  auto len = [&](size_t k) { return std::min(per_round, sendcount - k * per_round); };
  auto stage = [&](size_t k) { std::memcpy(Buf(rank_, first + k), in + k * per_round * es, len(k) * es); };
  // This rank's own block goes to its output from the staged copy, still in
  // this core's cache, while it waits for the others (not in place).
  auto own = [&](size_t k) {
    unsigned char* to = out + (static_cast<size_t>(rank_) * sendcount + k * per_round) * es;
    if (to != in + k * per_round * es) std::memcpy(to, Buf(rank_, first + k), len(k) * es);
  };
  // Pipelined as the all-reduce is: at barrier k every rank has staged
  // round k, and it stages round k+1 before copying round k out, so a rank
  // that arrives early has the next round to copy in instead of waiting.
  // Round k's buffer is written again at round k+3, after barrier k+2,
  // which every rank passes only once it has copied round k out.
  if (rounds == 0) return absl::OkStatus();
  stage(0);
  RETURN_IF_ERROR(Meet(MakeCall(CallKind::kAllGather, t, sendcount), w, [&] { own(0); }));
  for (size_t k = 0; k < rounds; ++k) {
    if (k + 1 < rounds) stage(k + 1);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      std::memcpy(out + (static_cast<size_t>(q) * sendcount + k * per_round) * es, Buf(q, first + k), len(k) * es);
    }
    if (k + 1 < rounds) RETURN_IF_ERROR(FlagBarrier(w, [&] { own(k + 1); }));
  }
  return absl::OkStatus();
}

absl::Status NodeShm::Broadcast(const void* send, void* recv, size_t count, DataType t, int root,
                                const Patience& w) {
  const size_t bytes = count * ElementSize(t);
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  for (size_t off = 0; off < bytes; off += round_bytes_) {
    const size_t n = std::min(round_bytes_, bytes - off);
    const uint64_t g = round_++;
    if (rank_ == root) std::memcpy(Buf(root, g), in + off, n);
    RETURN_IF_ERROR(off == 0 ? Meet(MakeCall(CallKind::kBroadcast, t, count, RedOp::kSum, root), w) : FlagBarrier(w));
    if (rank_ != root) std::memcpy(out + off, Buf(root, g), n);
  }
  return absl::OkStatus();
}

}  // namespace p2p
}  // namespace weft
