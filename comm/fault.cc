#include "comm/fault.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/env.h"
#include "core/status.h"

namespace weft {
namespace fault {

std::atomic<bool> g_armed{false};

namespace {

constexpr char kForms[] = "corrupt:R, flip:R, delay:R:MS or stop:R:N (R a world rank, MS >= 1, N >= 0)";

// The process's WEFT_FAULT, parsed on first use.
const absl::StatusOr<Spec>& EnvSpec() {
  static const absl::StatusOr<Spec> spec = [] {
    const char* v = std::getenv("WEFT_FAULT");
    absl::StatusOr<Spec> s = Parse(v != nullptr ? v : "");
    if (!s.ok()) return absl::StatusOr<Spec>(Annotate(s.status(), "WEFT_FAULT"));
    return s;
  }();
  return spec;
}

// Which world rank a communicator belongs to, and how many collectives that
// rank has run on its world and the world's splits.
struct Lineage {
  int world_rank = 0;
  std::shared_ptr<std::atomic<long long>> calls;
};

struct Table {
  std::mutex mu;
  std::unordered_map<const Communicator*, Lineage> of;
};

Table& GetTable() {
  static Table* t = new Table;  // never destroyed: communicators may outlive static destruction
  return *t;
}

// A communicator first seen here is a world's: its rank is the world rank.
Lineage Find(const Communicator& c) {
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.of.find(&c);
  if (it == t.of.end()) {
    it = t.of.emplace(&c, Lineage{c.rank(), std::make_shared<std::atomic<long long>>(0)}).first;
  }
  return it->second;
}

// Doubles each element: one more in a normal float's exponent, a shift for
// integers. Zero stays zero, so only elements this rank really contributes
// to are damaged.
template <typename U>
void RaiseExponent(unsigned char* p, size_t n, int mantissa_bits, int exponent_bits) {
  const U emax = (U{1} << exponent_bits) - 1;
  for (size_t i = 0; i < n; ++i) {
    U u;
    std::memcpy(&u, p + i * sizeof(U), sizeof(U));
    const U e = (u >> mantissa_bits) & emax;
    if (e == 0 || e >= emax - 1) continue;  // zero, subnormal, about to overflow, inf or nan
    u = static_cast<U>(u + (U{1} << mantissa_bits));
    std::memcpy(p + i * sizeof(U), &u, sizeof(U));
  }
}

template <typename U>
void ShiftLeft(unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    U u;
    std::memcpy(&u, p + i * sizeof(U), sizeof(U));
    u = static_cast<U>(u << 1);
    std::memcpy(p + i * sizeof(U), &u, sizeof(U));
  }
}

void Damage(unsigned char* p, size_t bytes, DataType t) {
  const size_t n = bytes / ElementSize(t);
  switch (t) {
    case DataType::kFloat32: return RaiseExponent<uint32_t>(p, n, 23, 8);
    case DataType::kFloat64: return RaiseExponent<uint64_t>(p, n, 52, 11);
    case DataType::kFloat16: return RaiseExponent<uint16_t>(p, n, 10, 5);
    case DataType::kBfloat16: return RaiseExponent<uint16_t>(p, n, 7, 8);
    case DataType::kInt8:
    case DataType::kUint8: return ShiftLeft<uint8_t>(p, n);
    case DataType::kInt16: return ShiftLeft<uint16_t>(p, n);
    case DataType::kInt32: return ShiftLeft<uint32_t>(p, n);
    case DataType::kInt64: return ShiftLeft<uint64_t>(p, n);
  }
}

// Flips the top bit of one element, a different one for each call.
void Flip(void* recv, size_t bytes, DataType t, long long call) {
  const size_t es = ElementSize(t);
  const size_t n = bytes / es;
  if (n == 0) return;
  const size_t i = static_cast<size_t>(static_cast<uint64_t>(call) * 2654435761u % n);
  // Little-endian: an element's top bit is in its last byte.
  static_cast<unsigned char*>(recv)[i * es + es - 1] ^= 0x80;
}

absl::Status Stopped(const Spec& s, int rank) {
  return Timeout("rank %d stopped taking part after its collective %lld (WEFT_FAULT=%s)", rank, s.after, s.text);
}

// The faulty rank's call after it stopped: it never returns before the
// communicator's timeout unless the communicator is aborted.
absl::Status Park(const Communicator& c, const Spec& s, int rank) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(c.options().timeout_ms);
  while (!c.aborted() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Stopped(s, rank);
}

std::string Describe(const Spec& s) {
  switch (s.kind) {
    case Kind::kCorrupt: return absl::StrFormat("rank %d's contribution to every reduction is doubled", s.rank);
    case Kind::kFlip: return absl::StrFormat("one element of rank %d's output is flipped in every collective", s.rank);
    case Kind::kDelay: return absl::StrFormat("rank %d sleeps %d ms before every collective", s.rank, s.delay_ms);
    case Kind::kStop: return absl::StrFormat("rank %d stops taking part after %lld collectives", s.rank, s.after);
    case Kind::kNone: break;
  }
  return "no fault";
}

absl::Status CheckWorld(const Communicator& c) {
  const Spec& s = *EnvSpec();
  if (s.rank >= c.size()) {
    return InvalidArgument("WEFT_FAULT = '%s' names rank %d, but the world has %d ranks (0 to %d)", s.text, s.rank,
                           c.size(), c.size() - 1);
  }
  if ((s.kind == Kind::kCorrupt || s.kind == Kind::kFlip) && c.memory() != MemKind::kHost) {
    return InvalidArgument("WEFT_FAULT = '%s' damages host buffers, but this world works on %s memory: use delay or "
                           "stop there", s.text, Name(c.memory()));
  }
  LogLine(LogLevel::kWarn, absl::StrFormat("fault injection is ON for testing, on rank %d of %d: WEFT_FAULT=%s (%s). "
                                           "Unset WEFT_FAULT for real work.",
                                           c.rank(), c.size(), s.text, Describe(s)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Spec> Parse(const std::string& text) {
  Spec s;
  s.text = text;
  if (text.empty()) return s;
  const std::vector<std::string> f = absl::StrSplit(text, ':');
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("'%s' is not a fault: %s; expected %s", text, why, kForms);
  };
  size_t want = 0;
  if (f[0] == "corrupt") {
    s.kind = Kind::kCorrupt, want = 2;
  } else if (f[0] == "flip") {
    s.kind = Kind::kFlip, want = 2;
  } else if (f[0] == "delay") {
    s.kind = Kind::kDelay, want = 3;
  } else if (f[0] == "stop") {
    s.kind = Kind::kStop, want = 3;
  } else {
    return bad(absl::StrFormat("unknown kind '%s'", f[0]));
  }
  if (f.size() != want) return bad(absl::StrFormat("%s takes %zu fields, not %zu", f[0], want, f.size()));
  if (!absl::SimpleAtoi(f[1], &s.rank) || s.rank < 0) {
    return bad(absl::StrFormat("rank '%s' is not a rank", f[1]));
  }
  if (s.kind == Kind::kDelay && (!absl::SimpleAtoi(f[2], &s.delay_ms) || s.delay_ms < 1)) {
    return bad(absl::StrFormat("MS '%s' is not a positive number of milliseconds", f[2]));
  }
  if (s.kind == Kind::kStop && (!absl::SimpleAtoi(f[2], &s.after) || s.after < 0)) {
    return bad(absl::StrFormat("N '%s' is not a count of collectives", f[2]));
  }
  return s;
}

absl::Status CheckEnv() {
  const absl::StatusOr<Spec>& s = EnvSpec();
  if (!s.ok()) return s.status();
  if (s->kind != Kind::kNone) g_armed.store(true, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> AtInit(absl::StatusOr<std::unique_ptr<Communicator>> comm) {
  if (!comm.ok() || !Armed()) return comm;
  RETURN_IF_ERROR(CheckWorld(**comm));
  return comm;
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> AtInit(
    absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> comms) {
  if (!comms.ok() || !Armed()) return comms;
  for (const auto& c : *comms) RETURN_IF_ERROR(CheckWorld(*c));
  return comms;
}

namespace {

// The faulty rank's call: delay and stop act here, on every kind of call;
// `run(n)` is the op (the n-th call) with the damage its kind of call takes.
absl::Status Faulty(Communicator& c, const Spec& s, const Lineage& l,
                    const std::function<absl::Status(long long)>& run) {
  // The calls this rank has begun, this one included.
  const long long n = l.calls->fetch_add(1, std::memory_order_relaxed) + 1;
  switch (s.kind) {
    case Kind::kDelay:
      std::this_thread::sleep_for(std::chrono::milliseconds(s.delay_ms));
      return run(n);
    case Kind::kStop: {
      if (n < s.after) return run(n);
      if (n == s.after) {
        RETURN_IF_ERROR(run(n));  // the N-th: taken part in, then wedged
        return Park(c, s, l.world_rank);
      }
      // stop:R:0 wedges in its first call without taking part.
      return s.after == 0 && n == 1 ? Park(c, s, l.world_rank) : Stopped(s, l.world_rank);
    }
    default: return run(n);
  }
}

}  // namespace

std::function<absl::Status()> Arm(Communicator& c, const Call& call, Op op) {
  const Spec& s = *EnvSpec();
  const Lineage l = Find(c);
  if (l.world_rank != s.rank) return [op = std::move(op), send = call.send] { return op(send); };
  return [&c, &s, l, call, op = std::move(op)]() -> absl::Status {
    return Faulty(c, s, l, [&](long long n) -> absl::Status {
      if (s.kind == Kind::kCorrupt && call.reduces && call.send_bytes > 0) {
        std::vector<unsigned char> damaged(static_cast<const unsigned char*>(call.send),
                                           static_cast<const unsigned char*>(call.send) + call.send_bytes);
        Damage(damaged.data(), damaged.size(), call.dtype);
        return op(damaged.data());
      }
      RETURN_IF_ERROR(op(call.send));
      if (s.kind == Kind::kFlip && call.recv != nullptr) Flip(call.recv, call.recv_bytes, call.dtype, n);
      return absl::OkStatus();
    });
  };
}

std::function<absl::Status()> ArmPieces(Communicator& c, std::shared_ptr<const std::vector<Piece>> pieces, DataType t,
                                        PiecesOp op) {
  const Spec& s = *EnvSpec();
  const Lineage l = Find(c);
  if (l.world_rank != s.rank) return [op = std::move(op), pieces = std::move(pieces)] { return op(*pieces); };
  return [&c, &s, l, t, pieces = std::move(pieces), op = std::move(op)]() -> absl::Status {
    return Faulty(c, s, l, [&](long long n) -> absl::Status {
      const size_t es = ElementSize(t);
      if (s.kind == Kind::kCorrupt) {
        // Each piece reads a damaged copy of its send and still writes its recv.
        std::vector<std::vector<unsigned char>> copies;
        std::vector<Piece> damaged = *pieces;
        copies.reserve(damaged.size());
        for (Piece& p : damaged) {
          const auto* from = static_cast<const unsigned char*>(p.send);
          copies.emplace_back(from, from + p.count * es);
          Damage(copies.back().data(), copies.back().size(), t);
          p.send = copies.back().data();
        }
        return op(damaged);
      }
      RETURN_IF_ERROR(op(*pieces));
      if (s.kind != Kind::kFlip) return absl::OkStatus();
      size_t total = 0;
      for (const Piece& p : *pieces) total += p.count;
      if (total == 0) return absl::OkStatus();
      // The element Flip would choose in the pieces laid end to end.
      size_t i = static_cast<size_t>(static_cast<uint64_t>(n) * 2654435761u % total);
      for (const Piece& p : *pieces) {
        if (i < p.count) {
          Flip(static_cast<unsigned char*>(p.recv) + i * es, es, t, 0);
          break;
        }
        i -= p.count;
      }
      return absl::OkStatus();
    });
  };
}

size_t ReadyOffer(const Communicator& c, const std::vector<Piece>& parts, size_t reduced, size_t offer, size_t upto,
                  DataType t) {
  if (!Armed()) return offer;
  const Spec& s = *EnvSpec();
  if (s.kind != Kind::kCorrupt || Find(c).world_rank != s.rank || upto <= reduced) return offer;
  const size_t es = ElementSize(t);
  for (const Piece& p : parts) {  // back to back from offset 0
    const size_t from = std::max(reduced, p.offset), to = std::min(upto, p.offset + p.count);
    if (from < to) Damage(static_cast<unsigned char*>(p.recv) + (from - p.offset) * es, (to - from) * es, t);
  }
  return upto;
}

void Inherit(const Communicator& parent, const Communicator* child) {
  if (child == nullptr) return;
  const Lineage l = Find(parent);
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  t.of[child] = l;
}

void Exempt(const Communicator* part) {
  if (part == nullptr) return;
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  t.of[part] = Lineage{-1, std::make_shared<std::atomic<long long>>(0)};  // no world rank: never the fault's
}

void Forget(const Communicator* c) {
  Table& t = GetTable();
  std::lock_guard<std::mutex> lock(t.mu);
  t.of.erase(c);
}

}  // namespace fault
}  // namespace weft
