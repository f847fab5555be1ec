// What a peer sends the socket bootstrap (comm/bootstrap/wire.h): a unique
// id, a joining rank's hello, frame headers and error payloads, as any bytes
// a stray connection or a rank of another weft version might send. Decoding
// must refuse or succeed, never read past the message; what it accepts must
// encode back to a message that decodes to the same thing.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "comm/bootstrap/wire.h"
#include "fuzz/input.h"

namespace {

namespace bs = weft::bootstrap;

template <size_t N>
bool Take(const uint8_t*& data, size_t& size, unsigned char (&out)[N]) {
  std::memset(out, 0, N);
  const size_t n = size < N ? size : N;
  std::memcpy(out, data, n);
  data += n;
  size -= n;
  return n == N;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = *data++;
  --size;
  switch (which % 4) {
    case 0: {
      unsigned char in[bs::kUniqueIdBytes], out[bs::kUniqueIdBytes];
      Take(data, size, in);
      auto id = bs::DecodeUniqueId(in);
      if (!id.ok()) break;
      bs::EncodeUniqueId(*id, out);
      auto again = bs::DecodeUniqueId(out);
      FUZZ_EXPECT(again.ok() && again->tag == id->tag && again->root.ToString() == id->root.ToString(),
                  "a unique id that does not survive its own encoding: %s", id->root.ToString().c_str());
      break;
    }
    case 1: {
      unsigned char in[bs::kHelloBytes], out[bs::kHelloBytes];
      Take(data, size, in);
      auto h = bs::DecodeHello(in);
      if (!h.ok()) break;
      bs::EncodeHello(*h, out);
      auto again = bs::DecodeHello(out);
      FUZZ_EXPECT(again.ok() && again->tag == h->tag && again->nranks == h->nranks && again->rank == h->rank &&
                      again->timeout_ms == h->timeout_ms,
                  "a hello that does not survive its own encoding");
      break;
    }
    case 2: {
      unsigned char in[bs::kFrameHeaderBytes], out[bs::kFrameHeaderBytes];
      Take(data, size, in);
      auto f = bs::DecodeFrameHeader(in);
      if (!f.ok()) break;
      FUZZ_EXPECT(f->length <= bs::kMaxFrameBytes, "a frame of %u bytes accepted", f->length);
      bs::EncodeFrameHeader(*f, out);
      FUZZ_EXPECT(std::memcmp(in, out, sizeof in) == 0, "a frame header that encodes to other bytes");
      break;
    }
    default: {
      const std::string payload(reinterpret_cast<const char*>(data), size);
      const absl::Status s = bs::DecodeError(payload);
      const absl::Status again = bs::DecodeError(bs::EncodeError(s));
      FUZZ_EXPECT(again == s, "an error frame that does not survive its own encoding: %s", s.ToString().c_str());
      break;
    }
  }
  return 0;
}
