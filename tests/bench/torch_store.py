"""weftCommInitWorld through a torch TCPStore, as torchrun's agent serves it.

Plays torchrun's part by hand: a TCPStore server (libuv's and the classic
one), then weft-bench's ranks with the variables torchrun gives its workers
(TORCHELASTIC_USE_AGENT_STORE=True). Also the failures a rank must report
rather than hang on: rank 0 never comes, and MASTER_PORT is no store.

    torch_store.py WEFT_BENCH
"""
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

import torch.distributed as dist

ARGS = ["all_reduce", "-b", "8", "-e", "64K", "-f", "8", "-c", "1"]


def ranks(bench, port, which, nranks, extra=None, late=None):
    """Runs weft-bench as ranks `which` of `nranks` (rank `late` a second after
    the others); returns [(rc, output)]."""
    procs = []
    for r in sorted(which, key=lambda r: r == late):
        if r == late:
            time.sleep(1)
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RUN_ID="store-test",
                   TORCHELASTIC_RESTART_COUNT="0", WEFT_SOCKET_IFNAME="lo", **(extra or {}))
        env.pop("WEFT_MASTER_PORT", None)
        procs.append(subprocess.Popen([bench] + ARGS, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    out = []
    for p in procs:
        so, se = p.communicate(timeout=120)
        out.append((p.returncode, so + se))
    return out


def expect(ok, what, outs):
    if not ok:
        for rc, text in outs:
            sys.stderr.write("--- rc %d\n%s\n" % (rc, text))
        sys.exit("torch_store.py: " + what)
    print("torch_store.py: ok:", what, flush=True)


def main():
    bench = sys.argv[1]
    for libuv in (True, False):
        store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=60), wait_for_workers=False,
                              use_libuv=libuv)
        outs = ranks(bench, store.port, [0, 1, 2], 3)
        expect(all(rc == 0 for rc, _ in outs), "3 ranks through %s TCPStore" % ("libuv's" if libuv else "the classic"),
               outs)
        # Another world of the same tag on that store, rank 0 late: the others
        # must wait for its new root, not join the last world's ended one.
        outs = ranks(bench, store.port, [0, 1, 2], 3, {"WEFT_BOOTSTRAP_TIMEOUT_MS": "10000"}, late=0)
        expect(all(rc == 0 for rc, _ in outs), "another world of the same tag, rank 0 late", outs)
        del store

    store = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=60), wait_for_workers=False)
    outs = ranks(bench, store.port, [1], 2, {"WEFT_BOOTSTRAP_TIMEOUT_MS": "2000"})
    expect(outs[0][0] != 0 and "rank 0 did not publish weft's bootstrap root" in outs[0][1],
           "rank 1 without rank 0 times out saying so", outs)
    del store

    # A listener that is no store: it accepts and says nothing.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    outs = ranks(bench, silent.getsockname()[1], [0], 2, {"WEFT_BOOTSTRAP_TIMEOUT_MS": "2000"})
    expect(outs[0][0] != 0 and "does not answer as a torch TCPStore" in outs[0][1]
           and "127.0.0.1:%d" % silent.getsockname()[1] in outs[0][1], "a port that is no store is named", outs)
    silent.close()


if __name__ == "__main__":
    main()
