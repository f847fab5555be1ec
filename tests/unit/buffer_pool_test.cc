// shard/buffer_pool.h: buffers are reused by size with live/pooled/peak
// accounting, and a buffer returned on a host stream is handed to later work
// on that stream at once but to the host only once the stream has passed the
// returning point (also when it was reused and returned again meanwhile).
#include "shard/buffer_pool.h"

#include <future>

#include <gtest/gtest.h>

namespace weft {
namespace shard {
namespace {

// Holds a stream at one point of its queue until Open().
class Gate {
 public:
  void Enqueue(HostStream& s) {
    s.Enqueue([f = opened_.get_future().share()] {
      f.wait();
      return absl::OkStatus();
    });
  }
  void Open() { opened_.set_value(); }

 private:
  std::promise<void> opened_;
};

TEST(BufferPool, ReusesBySizeAndAccounts) {
  BufferPool pool;
  auto a = pool.Get(1000);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(pool.stats().live_bytes, 1024u);  // 64-byte multiples
  pool.Put(*a);
  EXPECT_EQ(pool.stats().live_bytes, 0u);
  EXPECT_EQ(pool.stats().pooled_bytes, 1024u);
  auto b = pool.Get(1000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);
  auto c = pool.Get(1000);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *a);
  EXPECT_EQ(pool.stats().peak_live_bytes, 2048u);
  pool.Put(*b);
  pool.Put(*c);
}

TEST(BufferPool, StreamOrderedReuse) {
  BufferPool pool;
  HostStream s;
  Gate first, second;
  auto a = pool.Get(4096);
  ASSERT_TRUE(a.ok());
  first.Enqueue(s);            // stands for work still using `a`
  pool.PutOnStream(*a, &s);
  EXPECT_EQ(pool.stats().live_bytes, 0u);

  auto host = pool.Get(4096);  // the stream has not passed the return: not `a`
  ASSERT_TRUE(host.ok());
  EXPECT_NE(*host, *a);
  auto on_stream = pool.Get(4096, &s);  // later work on the same stream: `a`
  ASSERT_TRUE(on_stream.ok());
  EXPECT_EQ(*on_stream, *a);
  EXPECT_EQ(pool.stats().peak_live_bytes, 2u * 4096);

  // Reused, then returned again behind more work: the first return point must not free it to the host.
  second.Enqueue(s);
  pool.PutOnStream(*a, &s);
  first.Open();
  // Queue: gate, first return, gate, second return. Wait for the first two.
  s.WaitFor(s.Mark() - 2);
  auto host2 = pool.Get(4096);
  ASSERT_TRUE(host2.ok());
  EXPECT_NE(*host2, *a) << "handed to the host while the stream still uses it";
  second.Open();
  ASSERT_TRUE(s.Synchronize().ok());
  auto host3 = pool.Get(4096);
  ASSERT_TRUE(host3.ok());
  EXPECT_EQ(*host3, *a) << "the stream passed the return: the host may have it";
  for (void* p : {*host, *host2, *host3}) pool.Put(p);
  EXPECT_EQ(pool.stats().live_bytes, 0u);
}

}  // namespace
}  // namespace shard
}  // namespace weft
