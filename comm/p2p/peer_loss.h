// Whether this process has seen a peer die (hang.h's probe found a rank's
// process gone), for what runs at exit: MPI_Finalize synchronises with every
// rank of the job, a dead one included, and would never return
// (comm/bootstrap/mpi_runtime.cc skips it then).
#ifndef WEFT_COMM_P2P_PEER_LOSS_H_
#define WEFT_COMM_P2P_PEER_LOSS_H_

namespace weft {
namespace p2p {

void NotePeerLost();
bool PeerLost();

}  // namespace p2p
}  // namespace weft

#endif  // WEFT_COMM_P2P_PEER_LOSS_H_
