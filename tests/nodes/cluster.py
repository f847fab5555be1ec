#!/usr/bin/env python3
"""Runs a weft world across several "nodes" on one machine: each node is a
network namespace with its own UTS namespace (so its own hostname, and so
its own bootstrap::NodeKey), joined to the others by a veth pair to a bridge
in a namespace of its own. Nothing touches the host's interfaces: every
address (10.77.0.0/24) is assigned inside these namespaces.

  cluster.py --nodes 2 --per-node 2 [--rate 1gbit] [--timeout S]
             [--cut NODE@SECONDS | --kill NODE@SECONDS] [--within S]
             -- PROGRAM ARGS...

Rank r runs on node r // per-node with weft's own variables (WEFT_RANK,
WEFT_WORLD_SIZE, WEFT_ROOT=<node 0's address>:<port>), WEFT_SOCKET_IFNAME and
UCX_NET_DEVICES naming the node's veth, and WEFT_TEST_RANK, WEFT_TEST_NP,
WEFT_TEST_WORLD=env, WEFT_TEST_NODES, WEFT_TEST_NODE and a scratch
WEFT_TEST_DIR as tests/launch/launch.py gives them.

--rate caps each node's link with tbf in both directions (the node's egress
and the bridge port's egress towards it). --cut takes a node's link down
after that many seconds; --kill SIGKILLs every rank of a node then, at once
(one process group per node). With either, --within bounds how long after
the fault every surviving rank may still run, and --expect-named requires
every survivor's output to name the faulted node with all its ranks, as
weft words it ("node weftnode1 (ranks 2, 3)"). The run passes when every
rank that was not killed exits 0 (in time). Each rank's output goes to a
file and is printed, prefixed with its rank, once the run ends. Everything made is torn down on exit, also on SIGINT/SIGTERM, and a
run first removes what a killed earlier run left (by name).

Exit 77 when network namespaces cannot be made here (not root, no
CAP_NET_ADMIN, no veth or bridge support), with the reason printed.
"""
import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launch"))
from launch import LAUNCHER_VARS, stop  # noqa: E402

# Node namespaces PREFIX0..; the bridge's is PREFIXbr. WEFT_TEST_CLUSTER
# names another set, so that runs started side by side (a benchmark beside
# a test) do not tear down each other's nodes.
PREFIX = os.environ.get("WEFT_TEST_CLUSTER", "weftnode")
BRIDGE_NS = PREFIX + "br"
IFNAME = "wnet0"         # every node's end of its veth pair (one per namespace)
SUBNET = "10.77.0"
MAX_NODES = 16
SKIP = 77


def sh(*args, check=True, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stdout.strip()}")
    return r


def node_ns(k):
    return f"{PREFIX}{k}"


def node_addr(k):
    return f"{SUBNET}.{k + 1}"


def teardown():
    """Deletes every namespace of this script's naming, whoever made it:
    deleting a namespace deletes the veth ends inside it, and so their peers."""
    r = sh("ip", "netns", "list", check=False)
    names = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    for name in names:
        if name == BRIDGE_NS or (name.startswith(PREFIX) and name[len(PREFIX):].isdigit()):
            # Ranks a killed earlier run left running in it go first.
            for pid in sh("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
                remove_segments(pid)
            sh("ip", "netns", "del", name, check=False)


def remove_segments(pid):
    """A rank's shared-memory segments (comm/p2p/shm.cc names them
    /weft-<pid>-<n>): a killed rank leaves its own behind."""
    for f in glob.glob(f"/dev/shm/weft-{pid}-*"):
        try:
            os.unlink(f)
        except OSError:
            pass


def setup(nodes, rate):
    teardown()
    try:
        sh("ip", "netns", "add", BRIDGE_NS)
    except RuntimeError as e:
        print(f"cluster.py: SKIP: cannot make a network namespace here ({e})", file=sys.stderr)
        sys.exit(SKIP)
    try:
        sh("ip", "link", "add", "br0", "type", "bridge", ns=BRIDGE_NS)
    except RuntimeError as e:
        teardown()
        print(f"cluster.py: SKIP: no bridge inside a namespace ({e})", file=sys.stderr)
        sys.exit(SKIP)
    sh("ip", "link", "set", "br0", "up", ns=BRIDGE_NS)
    sh("ip", "link", "set", "lo", "up", ns=BRIDGE_NS)
    for k in range(nodes):
        ns, port = node_ns(k), f"port{k}"
        sh("ip", "netns", "add", ns)
        # Both ends are made inside the bridge's namespace, then one moves:
        # the host's own namespace never holds either.
        sh("ip", "link", "add", port, "type", "veth", "peer", "name", IFNAME, ns=BRIDGE_NS)
        sh("ip", "link", "set", IFNAME, "netns", ns, ns=BRIDGE_NS)
        sh("ip", "link", "set", port, "master", "br0", ns=BRIDGE_NS)
        sh("ip", "link", "set", port, "up", ns=BRIDGE_NS)
        sh("ip", "link", "set", "lo", "up", ns=ns)
        sh("ip", "addr", "add", f"{node_addr(k)}/24", "dev", IFNAME, ns=ns)
        sh("ip", "link", "set", IFNAME, "up", ns=ns)
        if rate:
            # A token bucket each way; the burst is at least one 10 ms slice
            # of the rate (tbf needs >= rate / HZ), the queue 50 ms of it.
            for dev, where in ((IFNAME, ns), (port, BRIDGE_NS)):
                sh("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "2mb", "latency",
                   "50ms", ns=where)
    # Every node reaches node 0 before any rank starts: a connection to a
    # port nothing listens on is refused (a reply), not timed out.
    probe = ("import socket, sys\ns = socket.socket(); s.settimeout(1)\n"
             "try: s.connect((sys.argv[1], 9))\nexcept ConnectionRefusedError: sys.exit(0)\n"
             "except OSError: sys.exit(1)\n")
    for k in range(1, nodes):
        for _ in range(50):
            if sh(sys.executable, "-c", probe, node_addr(0), check=False, ns=node_ns(k)).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"node {k} cannot reach node 0 at {node_addr(0)}")


def rank_env(args, rank, node, port, scratch):
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS) and not k.startswith("UCX_")}
    np_ = args.nodes * args.per_node
    env.update(WEFT_RANK=str(rank), WEFT_WORLD_SIZE=str(np_), WEFT_ROOT=f"{node_addr(0)}:{port}",
               WEFT_SOCKET_IFNAME="=" + IFNAME, UCX_NET_DEVICES=IFNAME, UCX_TLS=args.ucx_tls,
               WEFT_TEST_RANK=str(rank), WEFT_TEST_NP=str(np_), WEFT_TEST_WORLD="env",
               WEFT_TEST_NODES=str(args.nodes), WEFT_TEST_NODE=str(node), WEFT_TEST_DIR=scratch)
    return env


def node_of(args, rank):
    # block: ranks 0..per_node-1 on node 0, and so on (torchrun's and Slurm's
    # default); cyclic: rank r on node r % nodes (Slurm's --distribution=cyclic).
    return rank // args.per_node if args.placement == "block" else rank % args.nodes


def start_rank(args, rank, port, scratch, groups):
    node = node_of(args, rank)
    # Its own UTS namespace gives the node its own hostname; the command is
    # exec'd throughout, so the rank's pid is the one Popen returns. A node's
    # ranks share a process group, so a node is killed in one call.
    wrapped = ["ip", "netns", "exec", node_ns(node), "unshare", "--uts", "sh", "-c",
               f'hostname {node_ns(node)} && exec "$0" "$@"'] + args.cmd
    out = open(os.path.join(scratch, f"rank{rank}.out"), "w")
    pr = subprocess.Popen(wrapped, env=rank_env(args, rank, node, port, scratch), stdout=out,
                          stderr=subprocess.STDOUT, process_group=groups.get(node, 0))
    out.close()
    groups.setdefault(node, pr.pid)
    return pr


def named(args, node):
    """How weft names a node and its ranks in an error (comm/p2p/status_channel.cc)."""
    ranks = [r for r in range(args.nodes * args.per_node) if node_of(args, r) == node]
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"node {node_ns(node)} ({word} {', '.join(map(str, ranks))})"


def outputs(scratch, np_):
    texts = []
    for r in range(np_):
        try:
            with open(os.path.join(scratch, f"rank{r}.out"), errors="replace") as f:
                texts.append(f.read())
        except OSError:
            texts.append("")
    return texts


def parse_fault(spec):
    if spec is None:
        return None, None
    k, s = spec.split("@")
    return int(k), float(s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--per-node", type=int, default=1)
    p.add_argument("--rate", default=None, help="tbf rate on every node's link, e.g. 1gbit")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--port", type=int, default=29611, help="the bootstrap root's port on node 0")
    p.add_argument("--placement", choices=("block", "cyclic"), default="block", help="how ranks map to nodes")
    # Not sm: these nodes share one kernel's /dev/shm, and UCX's shared-memory
    # transports carry their traffic past the links (a cut link goes unseen).
    p.add_argument("--ucx-tls", default="tcp,self", help="UCX_TLS for every rank")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cut", default=None, help="NODE@SECONDS: take that node's link down then")
    g.add_argument("--kill", default=None, help="NODE@SECONDS: SIGKILL every rank of that node then")
    p.add_argument("--within", type=float, default=None, help="seconds after the fault every survivor must exit")
    p.add_argument("--expect-named", action="store_true",
                   help="every survivor's output must name the faulted node and all its ranks")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args()
    args.cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not args.cmd:
        p.error("no program to run")
    if not re.fullmatch(r"[a-z]{1,12}", PREFIX):
        p.error(f"WEFT_TEST_CLUSTER={PREFIX!r}: expected 1 to 12 lowercase letters (the namespaces' prefix)")
    if not 1 <= args.nodes <= MAX_NODES or args.per_node < 1:
        p.error(f"--nodes must be 1..{MAX_NODES}, --per-node >= 1")
    if os.geteuid() != 0:
        print("cluster.py: SKIP: making network namespaces needs root", file=sys.stderr)
        return SKIP
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        print("cluster.py: SKIP: needs ip (iproute2) and unshare (util-linux)", file=sys.stderr)
        return SKIP
    fault_node, fault_at = parse_fault(args.cut or args.kill)
    if fault_node is not None and not 0 <= fault_node < args.nodes:
        p.error("the fault's node is not one of --nodes")

    procs, pids, groups = [], [], {}
    scratch = tempfile.mkdtemp(prefix="weft-nodes-")

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        setup(args.nodes, args.rate)
        np_ = args.nodes * args.per_node
        for r in range(np_):
            procs.append(start_rank(args, r, args.port, scratch, groups))
            pids.append(procs[-1].pid)
        t0 = time.monotonic()
        deadline = t0 + args.timeout
        codes = [None] * np_
        ended = [None] * np_
        faulted = None  # when the fault happened
        victims = {r for r in range(np_) if node_of(args, r) == fault_node} if args.kill else set()
        while any(c is None for c in codes):
            now = time.monotonic()
            for r, pr in enumerate(procs):
                if codes[r] is None and pr.poll() is not None:
                    codes[r], ended[r] = pr.returncode, now
            if fault_node is not None and faulted is None and now - t0 >= fault_at:
                if args.cut:
                    sh("ip", "link", "set", IFNAME, "down", ns=node_ns(fault_node))
                    print(f"cluster.py: node {fault_node}'s link down at {now - t0:.1f} s", file=sys.stderr)
                else:
                    os.killpg(groups[fault_node], signal.SIGKILL)
                    print(f"cluster.py: killed node {fault_node} (ranks {sorted(victims)}) at {now - t0:.1f} s",
                          file=sys.stderr)
                faulted = now
            failed = [r for r, c in enumerate(codes) if c not in (None, 0) and r not in victims]
            late = (faulted is not None and args.within is not None and now > faulted + args.within)
            if failed or now > deadline or late:
                if failed:
                    why = f"rank(s) {failed} failed"
                elif late:
                    why = f"ranks still running {args.within} s after the fault"
                else:
                    why = f"ranks still running after {args.timeout} s"
                codes = stop(procs)
                print(f"cluster.py: {why}; exit codes {codes}", file=sys.stderr)
                return 1
            time.sleep(0.02)
        if faulted is not None:
            after = [f"{ended[r] - faulted:.1f}" for r in range(np_) if r not in victims]
            print(f"cluster.py: survivors ended {', '.join(after)} s after the fault", file=sys.stderr)
        print(f"cluster.py: {args.nodes} nodes x {args.per_node} ranks exit codes {codes}", file=sys.stderr)
        survivors = [c for r, c in enumerate(codes) if r not in victims]
        ok = all(c == 0 for c in survivors)
        if args.expect_named and fault_node is not None:
            want = named(args, fault_node)
            texts = outputs(scratch, np_)
            unnamed = [r for r in range(np_) if r not in victims and want not in texts[r]]
            if unnamed:
                print(f"cluster.py: rank(s) {unnamed} did not name {want!r}", file=sys.stderr)
                ok = False
            else:
                print(f"cluster.py: every survivor named {want!r}", file=sys.stderr)
        return 0 if ok else 1
    except KeyboardInterrupt as e:
        print(f"cluster.py: interrupted ({e})", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()
        for pid in pids:
            remove_segments(pid)
        for r, text in enumerate(outputs(scratch, len(procs))):
            for line in text.splitlines():
                print(f"[{r}] {line}", file=sys.stderr)
        teardown()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
