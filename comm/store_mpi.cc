#include "comm/store_mpi.h"

#include <cstdint>
#include <cstdlib>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "comm/bootstrap/launch.h"
#include "core/status.h"

namespace weft {
namespace {

// The job's name as the launcher gives it (Open MPI's PMIx namespace, its
// job id, MPICH's PMI key-value space), "" when none is set: ranks of two
// jobs may have the same MPI_COMM_WORLD ranks.
std::string JobName() {
  for (const char* v : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_KVSNAME"}) {
    if (const char* x = std::getenv(v); x != nullptr && *x != '\0') return x;
  }
  return "";
}

// What this rank publishes: "<world rank> <world size> <job>", or "-" and
// why it cannot take part.
std::string Offer(const CommOptions& options) {
  const BackendFactory* f = FindBackend(Backend::kMpi);
  const bootstrap::MpiHooks* mpi = bootstrap::Mpi();
  if (f == nullptr || f->init_mpi_group == nullptr || mpi == nullptr) return "- its libweft has no MPI";
  if (!bootstrap::MpiLauncherVariables() && !mpi->active()) return "- it was not started by an MPI launcher";
  absl::StatusOr<std::unique_ptr<bootstrap::Bootstrap>> world = mpi->world(options.bootstrap_timeout_ms);
  if (!world.ok()) return absl::StrCat("- MPI did not start: ", world.status().message());
  return absl::StrFormat("%d %d %s", (*world)->rank(), (*world)->size(), JobName());
}

// Rank 0's plan from every rank's offer: "mpi <world rank of rank 0> ...",
// or "none <why>".
std::string Plan(const std::vector<std::string>& offers) {
  std::vector<int> ranks;
  std::set<int> seen;
  int size0 = 0;
  std::string job0;
  for (size_t r = 0; r < offers.size(); ++r) {
    if (!offers[r].empty() && offers[r][0] == '-') return absl::StrFormat("none rank %d: %s", r, offers[r].substr(2));
    std::vector<std::string> f = absl::StrSplit(offers[r], absl::MaxSplits(' ', 2));
    int w = -1, n = 0;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &w) || !absl::SimpleAtoi(f[1], &n) || w < 0 || w >= n) {
      return absl::StrFormat("none rank %d published '%s', not an MPI rank", r, offers[r]);
    }
    if (r == 0) {
      size0 = n;
      job0 = f[2];
    } else if (n != size0 || f[2] != job0) {
      return absl::StrFormat("none rank %d is rank %d of an MPI job of %d ranks ('%s'), rank 0 of one of %d ('%s')",
                             r, w, n, f[2], size0, job0);
    }
    if (!seen.insert(w).second) {
      return absl::StrFormat("none rank %d is MPI_COMM_WORLD rank %d, as an earlier rank of the store is", r, w);
    }
    ranks.push_back(w);
  }
  return absl::StrCat("mpi ", absl::StrJoin(ranks, " "));
}

// MPI_Comm_create_group's tag, the same on every member: a hash of the
// prefix, which the store world shares and torch makes different for every
// group. Two groups with a rank in common must not make themselves with one
// tag at overlapping times (a rank finishing one while its peer in the other
// has begun); hashes into MPI's least tag range (32768) collide once in
// that many pairs of groups.
int GroupTag(const std::string& prefix) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : prefix) h = (h ^ c) * 16777619u;
  return static_cast<int>(h % 32768u);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> InitStoreMpi(bool required, int nranks, int rank,
                                                           const KeyValueStore& store, const std::string& prefix,
                                                           const CommOptions& options) {
  const std::string base = prefix + (prefix.empty() ? "" : "/") + "weft/mpi";
  const std::string plan_key = base + "/plan";
  RETURN_IF_ERROR(SetIn(store, rank, absl::StrCat(base, "/", rank), Offer(options)));
  std::string plan;
  if (rank == 0) {
    std::vector<std::string> offers;
    for (int r = 0; r < nranks; ++r) {
      ASSIGN_OR_RETURN(std::string offer, GetFrom(store, 0, absl::StrCat(base, "/", r),
                                                  absl::StrFormat("rank %d's MPI rank", r),
                                                  options.bootstrap_timeout_ms));
      offers.push_back(std::move(offer));
    }
    plan = Plan(offers);
    RETURN_IF_ERROR(SetIn(store, 0, plan_key, plan));
  } else {
    ASSIGN_OR_RETURN(plan, GetFrom(store, rank, plan_key, "rank 0's plan", options.bootstrap_timeout_ms));
  }
  std::vector<std::string> words = absl::StrSplit(plan, ' ');
  if (words[0] == "none") {
    if (!required) return std::unique_ptr<Communicator>();
    return InvalidUsage("backend MPI through a store needs every rank to be a rank of one MPI job (mpirun), but %s",
                        plan.substr(5));
  }
  std::vector<int> ranks;
  for (size_t i = 1; i < words.size(); ++i) {
    int w = 0;
    if (!absl::SimpleAtoi(words[i], &w)) break;
    ranks.push_back(w);
  }
  if (words[0] != "mpi" || ranks.size() != static_cast<size_t>(nranks)) {
    return InvalidUsage("the store's '%s' holds '%s', not weft's plan for %d ranks: is that key used by something "
                        "else?", plan_key, plan, nranks);
  }
  Log(LogLevel::kInfo, "init: rank %d of %d through a store, an MPI communicator of MPI_COMM_WORLD ranks %s", rank,
      nranks, plan.substr(4));
  return FindBackend(Backend::kMpi)->init_mpi_group(ranks, GroupTag(prefix), options);
}

}  // namespace weft
