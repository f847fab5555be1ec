// weftCommInitStore under an MPI launcher: an MPI communicator of the
// store world's members, which they agree on through the store.
//
// A torch process group (or any store world) under mpirun is some of
// MPI_COMM_WORLD's ranks, in an order of the framework's. Each member
// publishes its MPI_COMM_WORLD rank and size and its job's name under
// "<prefix>/weft/mpi/<rank>"; rank 0 checks that they are one MPI job's
// distinct ranks and publishes the plan under "<prefix>/weft/mpi/plan":
// either those ranks in store order, which the members then make into a
// communicator by themselves (MPI_Comm_create_group, non-members never
// called), or why not, and every member follows the same plan. So a world
// whose ranks are not all one MPI job's (another launcher, a libweft
// without MPI on some rank) falls back to the unique-id path on every rank
// alike, instead of leaving some ranks waiting in MPI.
//
//   ASSIGN_OR_RETURN(auto comm, InitStoreMpi(required, n, r, store, prefix, options));
//   if (comm == nullptr) ... the unique id through the store (InitRank)
#ifndef WEFT_COMM_STORE_MPI_H_
#define WEFT_COMM_STORE_MPI_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/registry.h"

namespace weft {

// Collective over the store world. nullptr (and OK) when the plan is not
// MPI and `required` is false (weftBackendAuto); with `required`
// (weftBackendMpi) that is an InvalidUsage naming why, on every rank.
absl::StatusOr<std::unique_ptr<Communicator>> InitStoreMpi(bool required, int nranks, int rank,
                                                           const KeyValueStore& store, const std::string& prefix,
                                                           const CommOptions& options);

}  // namespace weft

#endif  // WEFT_COMM_STORE_MPI_H_
