// shard/schedule.h: a ZeRO-3 step driven by the schedule reduces the same
// gradient shards as one without prefetching, never holds more than two
// groups gathered, learns the order in the first step; ZeRO-2 gathers the
// updated shards anew at each step.
#include "shard/schedule.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/multirank/harness.h"

namespace weft {
namespace shard {
namespace {

using kernels::TensorRef;
using testing::RunRanksExpecting;

// Four groups of different sizes, so padding and prefetch both matter.
const std::vector<std::vector<ParamSpec>> kGroups = {
    {{"emb", {11, 3}}}, {{"w1", {5, 5}}, {"b1", {5}}}, {{"w2", {7, 2}}}, {{"head", {3, 3}}, {"s", {}}}};

struct Model {
  std::vector<std::unique_ptr<ShardGroup>> groups;
};

Model Build(Communicator& c, BufferPool* pool) {
  Model m;
  for (const auto& specs : kGroups) {
    auto g = ShardGroup::Create(&c, nullptr, specs, {}, pool);
    EXPECT_TRUE(g.ok()) << g.status();
    auto master = (*g)->master();
    for (size_t k = 0; k < master.size(); ++k) master[k] = 0.25f * static_cast<float>(k % 7) + c.rank();
    m.groups.push_back(std::move(*g));
  }
  return m;
}

// Gradients that depend on the gathered parameters, so a wrong or stale gather shows.
std::vector<float> Grads(ShardGroup& g, int rank) {
  std::vector<float> out(g.layout().total_numel);
  auto p = g.FullParam(0);
  EXPECT_TRUE(p.ok()) << p.status();
  const float first = p.ok() ? static_cast<float*>(*p)[0] : 0.0f;
  for (size_t k = 0; k < out.size(); ++k) out[k] = first + static_cast<float>((k + rank) % 5);
  return out;
}

std::vector<TensorRef> Refs(ShardGroup& g, std::vector<float>& flat) {
  std::vector<TensorRef> refs;
  size_t at = 0;
  for (size_t n : g.layout().numel) {
    refs.push_back({flat.data() + at, n, DataType::kFloat32});
    at += n;
  }
  return refs;
}

// The two models' gradient shards, bit for bit.
void ExpectSameGrads(const Model& a, const Model& b) {
  for (size_t i = 0; i < a.groups.size(); ++i) {
    EXPECT_EQ(std::memcmp(a.groups[i]->grads().data(), b.groups[i]->grads().data(),
                          a.groups[i]->grads().size() * sizeof(float)), 0) << "group " << i;
  }
}

// One step, scheduled by s or (s null) unscheduled; `between` runs after
// the forward, to look at what the schedule holds there.
void Step(Model& m, ShardSchedule* s, int rank, const std::function<void()>& between = nullptr) {
  std::vector<std::vector<float>> keep;
  if (s != nullptr) {
    ASSERT_TRUE(s->BeginStep().ok());
  }
  for (auto& g : m.groups) {
    if (s != nullptr) {
      ASSERT_TRUE(s->PreForward(g.get()).ok());
      ASSERT_TRUE(s->PostForward(g.get()).ok());
    }
  }
  if (between) between();
  for (int i = static_cast<int>(m.groups.size()) - 1; i >= 0; --i) {
    ShardGroup& g = *m.groups[i];
    if (s != nullptr) {
      ASSERT_TRUE(s->PreBackward(&g).ok());
      keep.push_back(Grads(g, rank));  // read by the stream until EndStep
      ASSERT_TRUE(s->PostBackward(&g, Refs(g, keep.back())).ok());
    } else {
      ASSERT_TRUE(g.Unshard(nullptr).ok());
      std::vector<float> grads = Grads(g, rank);
      ASSERT_TRUE(g.ReduceGrads(Refs(g, grads), nullptr).ok());
      ASSERT_TRUE(g.Reshard().ok());
    }
  }
  if (s != nullptr) {
    ASSERT_TRUE(s->EndStep().ok());
  }
}

TEST(ShardSchedule, ZeroThreeMatchesUnscheduledAndHoldsTwoGroups) {
  RunRanksExpecting(3, [&](Communicator& c) {
    BufferPool pool;
    Model a = Build(c, &pool), b = Build(c, &pool);
    HostStream stream;
    ShardSchedule s(&stream, /*reshard_after_forward=*/true);
    for (int step = 0; step < 3; ++step) {
      Step(a, &s, c.rank());
      Step(b, nullptr, c.rank());
      EXPECT_LE(s.max_gathered(), 2) << "step " << step;
      if (step > 0) {
        EXPECT_EQ(s.max_gathered(), 2) << "prefetch is on from the second step";
      }
    }
    EXPECT_EQ(s.order().size(), kGroups.size());
    ExpectSameGrads(a, b);
    for (size_t i = 0; i < kGroups.size(); ++i) {
      EXPECT_FALSE(a.groups[i]->unsharded());
    }
    EXPECT_EQ(pool.stats().live_bytes, 0u);
  });
}

// GatheredAt says when a gather completed, not when the caller noticed: a
// prefetched group's gather finishes while the caller is away.
TEST(ShardSchedule, GatheredAtIsTheGathersCompletion) {
  using Clock = std::chrono::steady_clock;
  RunRanksExpecting(3, [&](Communicator& c) {
    BufferPool pool;
    Model m = Build(c, &pool);
    HostStream stream;
    ShardSchedule s(&stream, /*reshard_after_forward=*/true);
    EXPECT_EQ(s.GatheredAt(m.groups[0].get()).status().code(), absl::StatusCode::kFailedPrecondition)
        << "never gathered";
    Step(m, &s, c.rank());  // records the order: prefetch from now on
    ASSERT_TRUE(s.BeginStep().ok());
    const Clock::time_point start = Clock::now();
    ASSERT_TRUE(s.PreForward(m.groups[0].get()).ok());  // enqueues group 1's gather behind group 0's
    const Clock::time_point first_ready = Clock::now();
    auto t0 = s.GatheredAt(m.groups[0].get());
    ASSERT_TRUE(t0.ok()) << t0.status();
    EXPECT_GE(*t0, start);
    EXPECT_LE(*t0, first_ready);
    ASSERT_TRUE(s.PostForward(m.groups[0].get()).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // "computing": the prefetch runs meanwhile
    const Clock::time_point asked = Clock::now();
    ASSERT_TRUE(s.PreForward(m.groups[1].get()).ok());
    auto t1 = s.GatheredAt(m.groups[1].get());
    ASSERT_TRUE(t1.ok()) << t1.status();
    EXPECT_GT(*t1, *t0);
    EXPECT_LT(*t1, asked) << "the prefetched gather completed during the sleep";
    for (size_t i = 1; i < m.groups.size(); ++i) {
      if (i > 1) {
        ASSERT_TRUE(s.PreForward(m.groups[i].get()).ok());
      }
      ASSERT_TRUE(s.PostForward(m.groups[i].get()).ok());
    }
    ASSERT_TRUE(s.EndStep().ok());
  });
}

TEST(ShardSchedule, ZeroTwoGathersUpdatedShardsEachStep) {
  RunRanksExpecting(2, [&](Communicator& c) {
    BufferPool pool;
    Model m = Build(c, &pool);
    HostStream stream;
    ShardSchedule s(&stream, /*reshard_after_forward=*/false);
    Step(m, &s, c.rank());
    EXPECT_TRUE(m.groups[0]->unsharded()) << "ZeRO-2 keeps parameters gathered";
    // The optimizer's update of rank 0's shard must be seen everywhere at the next step.
    if (c.rank() == 0) m.groups[0]->master()[0] = 42.0f;
    ASSERT_TRUE(s.BeginStep().ok());
    ASSERT_TRUE(s.PreForward(m.groups[0].get()).ok());
    auto p = m.groups[0]->FullParam(0);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(static_cast<float*>(*p)[0], 42.0f);
    ASSERT_TRUE(s.EndStep().ok());
  });
}

// The override works the other way too: in a ZeRO-2 schedule a group set to
// reshard after its forward is released there, gathered again for its
// backward, and then kept like the others until the next BeginStep.
TEST(ShardSchedule, ZeroTwoGroupCanReshardAfterForward) {
  RunRanksExpecting(2, [&](Communicator& c) {
    BufferPool pool;
    Model m = Build(c, &pool), ref = Build(c, &pool);
    HostStream stream;
    ShardSchedule s(&stream, /*reshard_after_forward=*/false);
    ShardGroup* g = m.groups[1].get();
    ASSERT_TRUE(s.SetReshardAfterForward(g, true).ok());
    Step(m, &s, c.rank(), [&] {
      EXPECT_FALSE(g->unsharded()) << "released after its forward";
      EXPECT_TRUE(m.groups[0]->unsharded()) << "the others stay (ZeRO-2)";
    });
    EXPECT_TRUE(g->unsharded()) << "gathered for its backward and kept like the others";
    Step(ref, nullptr, c.rank());
    ExpectSameGrads(m, ref);
  });
}

// The pool's accounting bounds what ZeRO-3 holds: at most two gathered
// groups and one gradient buffer in flight (its reduction enqueued, its
// memory returned on the stream for the next prefetched gather), and no
// growth from step to step once prefetch is on (the second step). Equal groups of 48 floats (192 bytes, a multiple
// of the pool's 64-byte rounding) on 2 ranks, so the bound is exact.
TEST(ShardSchedule, PoolPeakIsTwoGroupsAndOneReductionWithoutGrowth) {
  RunRanksExpecting(2, [&](Communicator& c) {
    BufferPool pool;
    Model m;
    for (int i = 0; i < 4; ++i) {
      auto g = ShardGroup::Create(&c, nullptr, std::vector<ParamSpec>{{"w", {8, 6}}}, {}, &pool);
      ASSERT_TRUE(g.ok()) << g.status();
      m.groups.push_back(std::move(*g));
    }
    const size_t unsharded = m.groups[0]->layout().unsharded_numel() * sizeof(float);
    ASSERT_EQ(unsharded, 192u);
    HostStream stream;
    ShardSchedule s(&stream, /*reshard_after_forward=*/true);
    size_t held_after_second = 0;
    for (int step = 0; step < 4; ++step) {
      Step(m, &s, c.rank());
      const PoolStats st = pool.stats();
      EXPECT_EQ(st.live_bytes, 0u) << "step " << step;
      EXPECT_LE(st.peak_live_bytes, 3 * unsharded) << "step " << step;
      EXPECT_LE(st.pooled_bytes, 3 * unsharded) << "step " << step;
      if (step == 1) held_after_second = st.pooled_bytes;
      if (step > 1) {
        EXPECT_EQ(st.pooled_bytes, held_after_second) << "the pool grew at step " << step;
      }
    }
    EXPECT_EQ(s.max_gathered(), 2);
  });
}

// FSDP's root: a group kept gathered from its forward to its backward is
// not gathered again for the backward (a change to the shards in between
// does not show), the step's gradients are those of the unscheduled step,
// and nothing is left gathered after it.
TEST(ShardSchedule, KeptGroupIsNotGatheredAgainForItsBackward) {
  RunRanksExpecting(3, [&](Communicator& c) {
    BufferPool pool;
    Model a = Build(c, &pool), b = Build(c, &pool);
    HostStream stream;
    ShardSchedule s(&stream, /*reshard_after_forward=*/true);
    ShardGroup* root = a.groups[0].get();
    EXPECT_TRUE(s.reshard_after_forward(root));
    ASSERT_TRUE(s.SetReshardAfterForward(root, false).ok());
    EXPECT_FALSE(s.reshard_after_forward(root));
    EXPECT_TRUE(s.reshard_after_forward(a.groups[1].get()));
    for (int step = 0; step < 3; ++step) {
      Step(a, &s, c.rank());
      Step(b, nullptr, c.rank());
      EXPECT_LE(s.max_gathered(), 3) << "the root beside the two in use";
      EXPECT_EQ(s.gathered(), 0);
    }
    ExpectSameGrads(a, b);
    // Rank 0 holds element 0 of the root's first parameter (flat layout).
    ASSERT_TRUE(s.BeginStep().ok());
    ASSERT_TRUE(s.PreForward(root).ok());
    const float before = static_cast<float*>(*root->FullParam(0))[0];
    ASSERT_TRUE(s.PostForward(root).ok());
    EXPECT_TRUE(root->unsharded()) << "kept after its forward";
    if (c.rank() == 0) root->master()[0] += 100.0f;
    for (size_t i = 1; i < a.groups.size(); ++i) {
      ASSERT_TRUE(s.PreForward(a.groups[i].get()).ok());
      ASSERT_TRUE(s.PostForward(a.groups[i].get()).ok());
    }
    EXPECT_EQ(s.SetReshardAfterForward(root, true).code(), absl::StatusCode::kFailedPrecondition)
        << "not during a step";
    ASSERT_TRUE(s.PreBackward(root).ok());
    EXPECT_EQ(static_cast<float*>(*root->FullParam(0))[0], before) << "gathered again for the backward";
    ASSERT_TRUE(s.EndStep().ok());
    EXPECT_FALSE(root->unsharded()) << "ZeRO-3 releases it at the end of the step";
    if (c.rank() == 0) root->master()[0] -= 100.0f;
    // Resharded again, the same probe sees the change.
    ASSERT_TRUE(s.SetReshardAfterForward(root, true).ok());
    ASSERT_TRUE(s.BeginStep().ok());
    ASSERT_TRUE(s.PreForward(root).ok());
    ASSERT_TRUE(s.PostForward(root).ok());
    EXPECT_FALSE(root->unsharded());
    if (c.rank() == 0) root->master()[0] += 100.0f;
    ASSERT_TRUE(s.PreBackward(root).ok());
    EXPECT_EQ(static_cast<float*>(*root->FullParam(0))[0], before + 100.0f);
    ASSERT_TRUE(s.EndStep().ok());
    EXPECT_EQ(pool.stats().live_bytes, 0u);
  });
}

TEST(ShardSchedule, DeclaredOrderIsChecked) {
  HostStream stream;
  ShardSchedule s(&stream, true);
  EXPECT_EQ(s.SetOrder({nullptr}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.PreForward(nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.SetReshardAfterForward(nullptr, false).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shard
}  // namespace weft
