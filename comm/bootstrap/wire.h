// The socket bootstrap's bytes: the unique id, a joining rank's hello, and
// the frames that follow. Pure encode/decode functions, so the root's
// parsing of whatever arrives on its port is tested (and fuzzed) without a
// socket. Integers are little-endian on the wire.
//
//   unique id (128 bytes): magic "WFTU" | version u16 | family u16 | port u16
//     | pad u16 | IPv6 scope u32 | address 16 | job tag u64 | zeros
//   hello (32 bytes, rank -> root): magic "WFTB" | version u16 | pad u16
//     | job tag u64 | nranks i32 | rank i32 | timeout_ms i32 | pad u32
//   frame: type u32 | length u32 | `length` bytes
//     kGather   rank -> root: this rank's block of an all-gather
//     kGathered root -> rank: every rank's block, in rank order
//     kBye      rank -> root: this rank is done with the bootstrap
//     kError    root -> rank: code u32 (an absl code) | message
#ifndef WEFT_COMM_BOOTSTRAP_WIRE_H_
#define WEFT_COMM_BOOTSTRAP_WIRE_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weft {
namespace bootstrap {

inline constexpr size_t kUniqueIdBytes = 128;  // WEFT_UNIQUE_ID_BYTES
inline constexpr size_t kHelloBytes = 32;
inline constexpr size_t kFrameHeaderBytes = 8;
// The most one frame may carry: the root refuses a rank that announces more.
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

// An IPv4 or IPv6 address and port.
struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  int family() const { return addr.ss_family; }
  int port() const;
  // "10.1.2.3:29501", "[fe80::1%eth0]:29501".
  std::string ToString() const;
};

struct UniqueId {
  Endpoint root;
  uint64_t tag = 0;
};
void EncodeUniqueId(const UniqueId& id, unsigned char out[kUniqueIdBytes]);
// InvalidArgument naming what is wrong when the bytes are no unique id.
absl::StatusOr<UniqueId> DecodeUniqueId(const unsigned char in[kUniqueIdBytes]);

struct Hello {
  uint64_t tag = 0;
  int32_t nranks = 0;
  int32_t rank = 0;
  int32_t timeout_ms = 0;
};
void EncodeHello(const Hello& h, unsigned char out[kHelloBytes]);
// Fails on a wrong magic or version (not a weft rank); the tag, nranks and
// rank are the root's to judge.
absl::StatusOr<Hello> DecodeHello(const unsigned char in[kHelloBytes]);

enum class FrameType : uint32_t { kGather = 1, kGathered = 2, kBye = 3, kError = 4 };
struct FrameHeader {
  FrameType type = FrameType::kGather;
  uint32_t length = 0;
};
void EncodeFrameHeader(const FrameHeader& h, unsigned char out[kFrameHeaderBytes]);
// Fails on an unknown type or a length over kMaxFrameBytes.
absl::StatusOr<FrameHeader> DecodeFrameHeader(const unsigned char in[kFrameHeaderBytes]);

// A status as an error frame's payload, and back (a status that says so when
// the payload is malformed).
std::string EncodeError(const absl::Status& s);
absl::Status DecodeError(const std::string& payload);

}  // namespace bootstrap
}  // namespace weft

#endif  // WEFT_COMM_BOOTSTRAP_WIRE_H_
