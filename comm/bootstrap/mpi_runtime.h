// MPI's lifetime in a weft process (built only with MPI).
//
// Every weft piece that talks MPI (the MPI backend, the MPI bootstrap that
// UCX and NCCL worlds use under mpirun) calls EnsureInitialized() first and
// never calls MPI_Init or MPI_Finalize itself:
//
//   RETURN_IF_ERROR(weft::mpi::EnsureInitialized());
//   MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm);
//
// Ownership rule (weft.h, weftCommInitWorld): if the application initialised
// MPI, weft uses it and leaves it alone (never finalises it). If weft
// initialised MPI, it asks for MPI_THREAD_MULTIPLE (host streams run
// collectives on threads of their own) and finalises MPI once, at process
// exit, from an atexit handler. Once MPI has been finalised it cannot be
// initialised again, and EnsureInitialized says so instead of crashing.
#ifndef WEFT_COMM_BOOTSTRAP_MPI_RUNTIME_H_
#define WEFT_COMM_BOOTSTRAP_MPI_RUNTIME_H_

#include <string>

#include "absl/status/status.h"

namespace weft {
namespace mpi {

// Initialises MPI if nobody has, or checks that the application's MPI is
// usable. Thread-safe; cheap after the first call. Errors: SystemError when
// MPI_Init_thread fails, InvalidUsage when MPI was already finalised.
absl::Status EnsureInitialized();

// True once MPI is initialised and not yet finalised (by weft or by the
// application, say through mpi4py): an MPI program, whatever started it.
bool Active();

// More ranks of the job on this node than cores? Judged from the launcher's
// count of local ranks (every MPI launcher sets one of these); unknown
// counts as oversubscribed, the safe side. Polling loops then yield at once.
bool Oversubscribed();

// True once EnsureInitialized has succeeded and MPI is not yet finalised, and
// MPI runs below MPI_THREAD_MULTIPLE (an application that initialised MPI
// itself with less): weft then serialises its own MPI calls with
// CallLock(), since host streams call MPI from their own threads.
bool NeedsCallLock();
// Held around each MPI call weft makes when NeedsCallLock().
class CallLock {
 public:
  CallLock();
  ~CallLock();
  CallLock(const CallLock&) = delete;
  CallLock& operator=(const CallLock&) = delete;

 private:
  bool locked_;
};

// MPI's own text for an error code, e.g. "MPI_ERR_TRUNCATE: message truncated".
std::string ErrorString(int code);

}  // namespace mpi
}  // namespace weft

#endif  // WEFT_COMM_BOOTSTRAP_MPI_RUNTIME_H_
