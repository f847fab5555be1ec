"""The "weft" backend across nodes: a torch test at two nodes of two ranks, one torchrun per node.

    .venv/bin/python tests/torch/test_nodes.py tests/torch/test_collectives.py

tests/nodes/cluster.py makes two nodes on this machine (network namespaces with host names of their own, joined by a
bridge; node 0 is 10.77.0.1) and starts one torchrun in each with a static rendezvous on node 0
(`--nnodes 2 --node-rank K --master-addr 10.77.0.1`), as a Slurm batch script starts them. Each rank runs the
torch test, gloo's reference groups included (GLOO_SOCKET_IFNAME names the nodes' link). It passes when every rank
passed and weft's log (WEFT_DEBUG=INFO) shows each rank's world made across the two nodes: shared memory within a
node, UCX over TCP between them. Needs root; exits 77 (skipped) where cluster.py cannot make namespaces.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = os.path.join(HERE, "..", "nodes", "cluster.py")
NODES, PER_NODE = 2, 2
MASTER = "10.77.0.1"  # node 0's address (cluster.py)
SKIP = 77


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_nodes.py TORCH_TEST.py")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    # The node's rank is cluster.py's WEFT_TEST_NODE; weft's own launcher variables, which cluster.py sets for
    # worlds of its own, would mean nothing to torchrun's ranks.
    node_cmd = ('unset WEFT_RANK WEFT_WORLD_SIZE WEFT_ROOT; exec "$0" --nnodes %d --nproc-per-node %d '
                '--node-rank "$WEFT_TEST_NODE" --master-addr %s --master-port 29650 "$@"' % (NODES, PER_NODE, MASTER))
    env = dict(os.environ, WEFT_DEBUG="INFO", GLOO_SOCKET_IFNAME="wnet0",
               WEFT_TEST_CLUSTER=os.environ.get("WEFT_TEST_CLUSTER", "wefttorch"))
    r = subprocess.run([sys.executable, CLUSTER, "--nodes", str(NODES), "--per-node", "1", "--timeout", "500", "--",
                        "sh", "-c", node_cmd, torchrun, sys.argv[1]],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout)
    if r.returncode == SKIP:
        return SKIP
    if r.returncode != 0:
        print("FAIL: the job exited with %d" % r.returncode)
        return 1
    world = NODES * PER_NODE
    spread = [q for q in range(world) if "rank %d: %d nodes x %d ranks" % (q, NODES, PER_NODE) in r.stdout]
    if len(spread) != world:
        print("FAIL: weft's log shows the world across %d nodes on ranks %s only, not on all %d" %
              (NODES, spread, world))
        return 1
    print("every rank passed; the world spanned %d nodes of %d ranks" % (NODES, PER_NODE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
