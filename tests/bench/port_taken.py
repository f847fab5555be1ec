"""weft-bench under torchrun when the port above MASTER_PORT is taken.

torchrun's agent serves its store at MASTER_PORT; a port of weft's own
beside it (MASTER_PORT + 1) may be anyone's, since torchrun --standalone
picks MASTER_PORT among the ephemeral ports. weft rendezvous through the
agent's store instead, so the job must run while this script holds a
listener on MASTER_PORT + 1.

    port_taken.py TORCHRUN NPROC -- WEFT_BENCH ARGS...
"""
import socket
import subprocess
import sys


def two_free_ports():
    """A port P with P and P + 1 free now; P + 1 stays held by the listener returned."""
    for _ in range(100):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        if port >= 65535:
            continue
        above = socket.socket()
        try:
            above.bind(("0.0.0.0", port + 1))
        except OSError:
            above.close()
            continue
        above.listen(1)
        return port, above
    sys.exit("port_taken.py: found no free port with a free port above it")


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit(__doc__)
    torchrun, nproc, command = sys.argv[1], sys.argv[2], sys.argv[4:]
    port, held = two_free_ports()
    cmd = [torchrun, "--nnodes", "1", "--nproc-per-node", nproc, "--master-addr", "127.0.0.1",
           "--master-port", str(port), "--no-python"] + command
    print("port_taken.py: holding 0.0.0.0:%d; %s" % (port + 1, " ".join(cmd)), flush=True)
    try:
        rc = subprocess.run(cmd, timeout=150).returncode
    finally:
        held.close()
    if rc != 0:
        sys.exit("port_taken.py: torchrun exited %d with MASTER_PORT + 1 taken" % rc)


if __name__ == "__main__":
    main()
