// WeftBackend::split and ::shrink: a subgroup of a group, for torch's
// split_group, and the group without some of its ranks, for shrink_group.
//
// torch splits a group (ProcessGroup::splitGroup) where init_process_group
// was given a device_id: dist.split_group, and DeviceMesh's dimensions on
// CUDA. NCCL needs every rank of the parent for ncclCommSplit; a weft
// communicator is made through a store by its members alone, so a split is a
// new group of the members, and a rank outside it has nothing to do
// (perform_nocolor_split, module.cc, is a no-op for that reason).
//
// The members meet under a key of their own in the parent's store, not in
// the store torch hands the split: torch names that store after a hash of the
// ranks and of how many groups the calling rank belongs to, which differs
// between members once a new_group has left some of them out, and members
// meeting there would wait for each other until the split's timeout (torch's
// default: 30 minutes). Every member of a split
// has taken part in every earlier split into the same ranks, so "the ranks,
// and how many children they have had" is the same on all of them.
//
// shrink_group (torch 2.11) is how a job goes on after some of its ranks
// failed: the others make the group again without them. That is a split into
// the remaining ranks that the excluded ranks, dead or alive, never see; it
// meets under a key of its own (a shrink is never the same call as a split).
#include <algorithm>
#include <string>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "backend.h"

namespace weft_c10d {

c10::intrusive_ptr<WeftOptions> WeftOptions::Copy() const {
  auto copy = c10::make_intrusive<WeftOptions>(timeout);
  copy->group_name = group_name;
  copy->group_desc = group_desc;
  copy->global_ranks_in_group = global_ranks_in_group;
  return copy;
}

c10::intrusive_ptr<c10d::Backend::Options> WeftBackend::getBackendOptions() {
  auto opts = c10::make_intrusive<WeftOptions>(std::chrono::milliseconds(comms_.timeout_ms()));
  opts->group_name = getGroupUid();
  opts->group_desc = getGroupDesc();
  return opts;
}

c10::intrusive_ptr<c10d::Backend> WeftBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::vector<int>& ranks,
                                                     const c10::intrusive_ptr<Options>& opts) {
  std::vector<bool> seen(static_cast<size_t>(getSize()), false);
  for (int r : ranks) {
    TORCH_CHECK(r >= 0 && r < getSize(), "weft: split on rank ", getRank(), ": ranks holds ", r,
                ", outside this group of ", getSize());
    TORCH_CHECK(!seen[static_cast<size_t>(r)], "weft: split on rank ", getRank(), ": ranks holds ", r, " twice");
    seen[static_cast<size_t>(r)] = true;
  }
  const auto at = std::find(ranks.begin(), ranks.end(), getRank());
  if (at == ranks.end()) return {};  // not a member: torch expects no backend
  std::lock_guard<std::mutex> lock(split_mu_);
  // torch 2.11's splitGroup asks each device type's backend in turn, and
  // this one backend serves both cpu and cuda: the second ask, with the same
  // store, gets the first's child. (The store is held, so no later split's
  // can take its address.)
  if (auto child = split_child_.lock(); child && split_store_.get() == store.get()) return child;
  c10::intrusive_ptr<c10d::Backend> child = Child("split", ranks, opts);
  split_store_ = store;
  split_child_ = c10::weak_intrusive_ptr<c10d::Backend>(child);
  return child;
}

c10::intrusive_ptr<c10d::Backend> WeftBackend::shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                                      const c10::intrusive_ptr<Options>& opts_override) {
  TORCH_CHECK_VALUE(shrink_flags == kShrinkDefault || shrink_flags == kShrinkAbort, "weft: shrink on rank ",
                    getRank(), ": shrink_flags ", shrink_flags, " (SHRINK_DEFAULT ", kShrinkDefault,
                    " or SHRINK_ABORT ", kShrinkAbort, ")");
  TORCH_CHECK_VALUE(!ranks_to_exclude.empty(), "weft: shrink on rank ", getRank(), ": no ranks to exclude");
  std::vector<bool> out(static_cast<size_t>(getSize()), false);
  for (int64_t r : ranks_to_exclude) {
    TORCH_CHECK_VALUE(r >= 0 && r < getSize(), "weft: shrink on rank ", getRank(), ": ranks_to_exclude holds ", r,
                      ", outside this group of ", getSize());
    TORCH_CHECK_VALUE(!out[static_cast<size_t>(r)], "weft: shrink on rank ", getRank(), ": ranks_to_exclude holds ",
                      r, " twice");
    TORCH_CHECK_VALUE(r != getRank(), "weft: shrink on rank ", getRank(), ": ranks_to_exclude holds this rank; "
                      "only the remaining ranks shrink the group");
    out[static_cast<size_t>(r)] = true;
  }
  // The old group's work in flight fails now rather than at its timeout
  // (it may wait on a rank that is gone).
  if (shrink_flags == kShrinkAbort) abort();
  std::vector<int> ranks;
  for (int r = 0; r < getSize(); ++r) {
    if (!out[static_cast<size_t>(r)]) ranks.push_back(r);
  }
  std::lock_guard<std::mutex> lock(split_mu_);
  return Child("shrink", ranks, opts_override);
}

c10::intrusive_ptr<c10d::Backend> WeftBackend::Child(const char* why, const std::vector<int>& ranks,
                                                     const c10::intrusive_ptr<Options>& opts) {
  std::string key = "weft/";
  key += why;
  for (size_t i = 0; i < ranks.size(); ++i) {
    key += i ? ',' : '/';
    key += std::to_string(ranks[i]);
  }
  key += '/';
  key += std::to_string(splits_[{why, ranks}]++);
  key += '/';
  const auto at = std::find(ranks.begin(), ranks.end(), getRank());
  const auto timeout = opts ? opts->timeout : std::chrono::milliseconds(comms_.timeout_ms());
  return c10::make_intrusive<WeftBackend>(c10::make_intrusive<c10d::PrefixStore>(key, comms_.store()),
                                          static_cast<int>(at - ranks.begin()), static_cast<int>(ranks.size()),
                                          timeout);
}

}  // namespace weft_c10d
