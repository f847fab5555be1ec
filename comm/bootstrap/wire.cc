#include "comm/bootstrap/wire.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <cstring>

#include "absl/strings/str_format.h"
#include "core/status.h"

namespace weft {
namespace bootstrap {
namespace {

constexpr unsigned char kIdMagic[4] = {'W', 'F', 'T', 'U'};
constexpr unsigned char kHelloMagic[4] = {'W', 'F', 'T', 'B'};
constexpr uint16_t kVersion = 1;

template <typename T>
void Put(unsigned char* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<unsigned char>(static_cast<uint64_t>(v) >> (8 * i));
}
template <typename T>
T Get(const unsigned char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<T>(v);
}

}  // namespace

int Endpoint::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  return 0;
}

std::string Endpoint::ToString() const {
  char host[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(addr).sin_addr, host, sizeof(host));
    return absl::StrFormat("%s:%d", host, port());
  }
  if (family() == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(addr);
    inet_ntop(AF_INET6, &a6.sin6_addr, host, sizeof(host));
    char ifname[IF_NAMESIZE] = {};
    if (a6.sin6_scope_id != 0 && if_indextoname(a6.sin6_scope_id, ifname) != nullptr) {
      return absl::StrFormat("[%s%%%s]:%d", host, ifname, port());
    }
    return absl::StrFormat("[%s]:%d", host, port());
  }
  return "(no address)";
}

void EncodeUniqueId(const UniqueId& id, unsigned char out[kUniqueIdBytes]) {
  std::memset(out, 0, kUniqueIdBytes);
  std::memcpy(out, kIdMagic, 4);
  Put<uint16_t>(out + 4, kVersion);
  Put<uint16_t>(out + 6, static_cast<uint16_t>(id.root.family()));
  Put<uint16_t>(out + 8, static_cast<uint16_t>(id.root.port()));
  if (id.root.family() == AF_INET) {
    std::memcpy(out + 16, &reinterpret_cast<const sockaddr_in&>(id.root.addr).sin_addr, 4);
  } else if (id.root.family() == AF_INET6) {
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(id.root.addr);
    Put<uint32_t>(out + 12, a6.sin6_scope_id);
    std::memcpy(out + 16, &a6.sin6_addr, 16);
  }
  Put<uint64_t>(out + 32, id.tag);
}

absl::StatusOr<UniqueId> DecodeUniqueId(const unsigned char in[kUniqueIdBytes]) {
  if (std::memcmp(in, kIdMagic, 4) != 0) {
    return InvalidArgument("id is not a weftUniqueId (its first bytes are not weft's): pass the bytes "
                           "weftGetUniqueId wrote, unchanged");
  }
  const uint16_t version = Get<uint16_t>(in + 4);
  if (version != kVersion) {
    return InvalidArgument("id has version %d, and this libweft reads version %d: every rank must run the same "
                           "weft", version, kVersion);
  }
  UniqueId id;
  const int family = Get<uint16_t>(in + 6);
  const uint16_t port = Get<uint16_t>(in + 8);
  if (port == 0) return InvalidArgument("id names port 0: it is no weftUniqueId");
  if (family == AF_INET) {
    auto& a4 = reinterpret_cast<sockaddr_in&>(id.root.addr);
    a4.sin_family = AF_INET;
    a4.sin_port = htons(port);
    std::memcpy(&a4.sin_addr, in + 16, 4);
    id.root.len = sizeof(sockaddr_in);
  } else if (family == AF_INET6) {
    auto& a6 = reinterpret_cast<sockaddr_in6&>(id.root.addr);
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons(port);
    a6.sin6_scope_id = Get<uint32_t>(in + 12);
    std::memcpy(&a6.sin6_addr, in + 16, 16);
    id.root.len = sizeof(sockaddr_in6);
  } else {
    return InvalidArgument("id names address family %d (expected AF_INET or AF_INET6): it is no weftUniqueId",
                           family);
  }
  id.tag = Get<uint64_t>(in + 32);
  return id;
}

void EncodeHello(const Hello& h, unsigned char out[kHelloBytes]) {
  std::memset(out, 0, kHelloBytes);
  std::memcpy(out, kHelloMagic, 4);
  Put<uint16_t>(out + 4, kVersion);
  Put<uint64_t>(out + 8, h.tag);
  Put<uint32_t>(out + 16, static_cast<uint32_t>(h.nranks));
  Put<uint32_t>(out + 20, static_cast<uint32_t>(h.rank));
  Put<uint32_t>(out + 24, static_cast<uint32_t>(h.timeout_ms));
}

absl::StatusOr<Hello> DecodeHello(const unsigned char in[kHelloBytes]) {
  if (std::memcmp(in, kHelloMagic, 4) != 0) return InvalidArgument("not a weft bootstrap hello (bad magic)");
  const uint16_t version = Get<uint16_t>(in + 4);
  if (version != kVersion) return InvalidArgument("a weft bootstrap hello of version %d (this root speaks %d)", version, kVersion);
  Hello h;
  h.tag = Get<uint64_t>(in + 8);
  h.nranks = static_cast<int32_t>(Get<uint32_t>(in + 16));
  h.rank = static_cast<int32_t>(Get<uint32_t>(in + 20));
  h.timeout_ms = static_cast<int32_t>(Get<uint32_t>(in + 24));
  return h;
}

void EncodeFrameHeader(const FrameHeader& h, unsigned char out[kFrameHeaderBytes]) {
  Put<uint32_t>(out, static_cast<uint32_t>(h.type));
  Put<uint32_t>(out + 4, h.length);
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(const unsigned char in[kFrameHeaderBytes]) {
  FrameHeader h;
  const uint32_t type = Get<uint32_t>(in);
  if (type < 1 || type > 4) return InvalidArgument("a bootstrap frame of unknown type %d", type);
  h.type = static_cast<FrameType>(type);
  h.length = Get<uint32_t>(in + 4);
  if (h.length > kMaxFrameBytes) {
    return InvalidArgument("a bootstrap frame of %d bytes (at most %d)", h.length, kMaxFrameBytes);
  }
  return h;
}

std::string EncodeError(const absl::Status& s) {
  std::string out(4, '\0');
  Put<uint32_t>(reinterpret_cast<unsigned char*>(out.data()), static_cast<uint32_t>(s.code()));
  out += std::string(s.message());
  return out;
}

absl::Status DecodeError(const std::string& payload) {
  if (payload.size() < 4) return SystemError("the bootstrap root sent a malformed error");
  const uint32_t code = Get<uint32_t>(reinterpret_cast<const unsigned char*>(payload.data()));
  if (code == 0 || code > 16) return SystemError("the bootstrap root sent an error of unknown code %d", code);
  return absl::Status(static_cast<absl::StatusCode>(code), payload.substr(4));
}

}  // namespace bootstrap
}  // namespace weft
