#include "comm/bootstrap/torch_store.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace weft {
namespace bootstrap {
namespace {

enum Query : uint8_t { kValidate = 0, kSet = 1, kGet = 3, kAdd = 4, kWait = 6, kPing = 13 };
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
// A value larger than this is no unique id of ours: refuse it rather than
// allocate what a stray server announces.
constexpr uint64_t kMaxValueBytes = 1u << 20;

void PutU32(std::string* b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b->push_back(static_cast<char>(v >> (8 * i)));
}
void PutString(std::string* b, const std::string& s) {
  PutU64(b, s.size());
  b->append(s);
}
uint64_t GetLe(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
// TCPStore's client puts "/" before every key.
std::string StoreKey(const std::string& key) { return "/" + key; }

}  // namespace

absl::StatusOr<TorchStore> TorchStore::Connect(const std::string& host, int port, Deadline deadline) {
  ASSIGN_OR_RETURN(Endpoint at, Resolve(host, port));
  ASSIGN_OR_RETURN(Fd fd, ConnectWithRetry(at, deadline));
  TorchStore s(std::move(fd), absl::StrCat("torch's store at ", host, ":", port));
  std::string hello(1, static_cast<char>(kValidate));
  PutU32(&hello, kValidationMagic);
  const uint32_t nonce = static_cast<uint32_t>(getpid());
  hello.push_back(static_cast<char>(kPing));
  PutU32(&hello, nonce);
  RETURN_IF_ERROR(s.Send(hello, deadline, "validation and ping"));
  unsigned char answer[4];
  absl::Status got = s.Recv(answer, sizeof(answer), deadline, "the answer to a ping");
  if (!got.ok() || GetLe(answer, 4) != nonce) {
    return InvalidArgument("%s does not answer as a torch TCPStore (%s): MASTER_ADDR:MASTER_PORT must be the store "
                           "torchrun's agent serves, or set WEFT_MASTER_PORT to give weft a port of its own",
                           s.where_, got.ok() ? "a wrong ping answer" : got.message());
  }
  return s;
}

absl::Status TorchStore::Set(const std::string& key, const std::string& value, Deadline deadline) {
  std::string b(1, static_cast<char>(kSet));
  PutString(&b, StoreKey(key));
  PutString(&b, value);
  return Send(b, deadline, "setting " + key);
}

absl::StatusOr<int64_t> TorchStore::Add(const std::string& key, int64_t delta, Deadline deadline) {
  std::string b(1, static_cast<char>(kAdd));
  PutString(&b, StoreKey(key));
  PutU64(&b, static_cast<uint64_t>(delta));
  RETURN_IF_ERROR(Send(b, deadline, "adding to " + key));
  unsigned char sum[8];
  RETURN_IF_ERROR(Recv(sum, sizeof(sum), deadline, "the sum of " + key));
  return static_cast<int64_t>(GetLe(sum, 8));
}

absl::StatusOr<std::string> TorchStore::WaitGet(const std::string& key, Deadline deadline) {
  std::string b(1, static_cast<char>(kWait));
  PutU64(&b, 1);
  PutString(&b, StoreKey(key));
  RETURN_IF_ERROR(Send(b, deadline, "waiting for " + key));
  unsigned char ready = 0xff;
  RETURN_IF_ERROR(Recv(&ready, 1, deadline, "waiting for " + key));
  if (ready != 0) return SystemError("%s answered a wait for %s with %d, not 0 (stop waiting)", where_, key, ready);
  b.assign(1, static_cast<char>(kGet));
  PutString(&b, StoreKey(key));
  RETURN_IF_ERROR(Send(b, deadline, "getting " + key));
  unsigned char size[8];
  RETURN_IF_ERROR(Recv(size, sizeof(size), deadline, "the size of " + key));
  const uint64_t n = GetLe(size, 8);
  if (n > kMaxValueBytes) return SystemError("%s holds %d bytes under %s: not weft's", where_, n, key);
  std::string value(n, '\0');
  RETURN_IF_ERROR(Recv(value.data(), value.size(), deadline, "the value of " + key));
  return value;
}

absl::Status TorchStore::Send(const std::string& bytes, Deadline deadline, const std::string& what) {
  return WriteAll(fd_.get(), bytes.data(), bytes.size(), deadline, absl::StrCat(what, " to ", where_));
}

absl::Status TorchStore::Recv(void* out, size_t n, Deadline deadline, const std::string& what) {
  return ReadAll(fd_.get(), out, n, deadline, absl::StrCat(what, " from ", where_));
}

}  // namespace bootstrap
}  // namespace weft
