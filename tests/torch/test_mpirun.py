"""The "weft" backend under mpirun, as docs/torch.md's launcher table gives it: mpirun starts the ranks, each
sets torch's RANK, WORLD_SIZE and LOCAL_RANK from Open MPI's variables, and init_process_group("weft") forms
the group through env:// (MASTER_ADDR and MASTER_PORT passed with -x). Its host communicators are then MPI
communicators of the group's ranks.

    .venv/bin/python tests/torch/test_mpirun.py NP
    .venv/bin/python tests/torch/test_mpirun.py NP tests/torch/test_collectives.py   # another torch test

Started without Open MPI's variables it is the launcher: it picks a port, runs itself under
`mpirun -n NP --oversubscribe` with WEFT_DEBUG=INFO, and checks from weft's log that every group of every rank
was made on MPI. Each rank checks all_reduce, all_gather_into_tensor, reduce_scatter_tensor and broadcast on
exact integers against gloo in the same job, on the whole world and on a group of its first and last ranks
(the others never join its making), and ten steps of stock DDP against the same over gloo (parameters within 1e-6).
With a script, the ranks run that torch test instead (written for torchrun: its variables are set from
Open MPI's), and the launcher checks that each rank's world was made on MPI. Exits 77 (skipped) where mpirun
is not installed.
"""

import os
import runpy
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Passed to the ranks: Open MPI exports only what -x names.
PASSED = ("PYTHONPATH", "WEFT_LIBRARY", "WEFT_C10D_MODULE", "WEFT_SOCKET_IFNAME", "OMP_NUM_THREADS",
          "PYTHONUNBUFFERED", "WEFT_DEBUG")


def launch(np, script):
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None:
        print("skip: needs mpirun (Open MPI)")
        return 77
    sys.path.insert(0, os.path.join(HERE, "..", "common"))
    from ports import free_port
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WEFT_DEBUG="INFO")
    cmd = [mpirun, "-n", str(np), "--oversubscribe", "--timeout", "150", "-x", "MASTER_ADDR", "-x", "MASTER_PORT"]
    for name in PASSED:
        if name in env:
            cmd += ["-x", name]
    cmd += [sys.executable, os.path.abspath(__file__)] + ([os.path.abspath(script)] if script else [])
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        return r.returncode
    made = r.stdout.count("through a store, an MPI communicator")
    # Here: the world on every rank, and the group of the first and the last rank on both. Another test: at
    # least the world on every rank (its groups are its own), and none of its host communicators on UCX.
    want = np if script else np + 2
    on_ucx = r.stdout.count("backend ucx, memory host")
    wrong_count = made < want if script else made != want
    if wrong_count or on_ucx:
        print("FAIL: %d host communicators were made on MPI (expected %s%d) and %d on UCX" % (
            made, "at least " if script else "", want, on_ucx))
        return 1
    return 0


def torchrun_variables():
    """torch's launcher variables, from Open MPI's."""
    for torch_name, ompi in (("RANK", "RANK"), ("WORLD_SIZE", "SIZE"), ("LOCAL_RANK", "LOCAL_RANK"),
                             ("LOCAL_WORLD_SIZE", "LOCAL_SIZE")):
        os.environ[torch_name] = os.environ["OMPI_COMM_WORLD_" + ompi]


def rank_main():
    torchrun_variables()
    import torch
    import torch.distributed as dist
    import weft.torch  # noqa: F401  registers "weft"

    dist.init_process_group("weft")
    gloo = dist.new_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["OMPI_COMM_WORLD_SIZE"]), world
    assert dist.get_backend() == "weft", dist.get_backend()

    def both(fn):
        """fn(group) over weft and over gloo: their results, which must be equal."""
        return fn(None), fn(gloo)

    n = 1000 * world + 3 * world
    base = torch.arange(n, dtype=torch.int64) * (rank + 1)

    def all_reduce(group):
        t = base.clone()
        dist.all_reduce(t, group=group)
        return t

    def all_gather(group):
        out = torch.empty(n * world, dtype=torch.int64)
        dist.all_gather_into_tensor(out, base, group=group)
        return out

    def reduce_scatter(group):
        out = torch.empty(n // world, dtype=torch.int64)
        dist.reduce_scatter_tensor(out, base, op=dist.ReduceOp.MAX, group=group)
        return out

    def broadcast(group):
        t = base.clone()
        dist.broadcast(t, src=world - 1, group=group)  # the last rank: a member of every group here
        return t

    for name, fn in [("all_reduce", all_reduce), ("all_gather_into_tensor", all_gather),
                     ("reduce_scatter_tensor", reduce_scatter), ("broadcast", broadcast)]:
        w, g = both(fn)
        assert torch.equal(w, g), "%s: weft and gloo differ on rank %d" % (name, rank)
    assert torch.equal(all_reduce(None), torch.arange(n, dtype=torch.int64) * (world * (world + 1) // 2))

    # A group of the first and the last rank: only they make it (the others never call weft for it).
    ends = [0, world - 1]
    weft_ends, gloo_ends = dist.new_group(ends), dist.new_group(ends, backend="gloo")
    if rank in ends:
        for name, fn in [("all_reduce", all_reduce), ("broadcast", broadcast)]:
            w, g = fn(weft_ends), fn(gloo_ends)
            assert torch.equal(w, g), "%s on ranks %s: weft and gloo differ on rank %d" % (name, ends, rank)

    # Stock DDP, ten steps, over weft and over gloo from the same weights and batches.
    from torch.nn.parallel import DistributedDataParallel as DDP
    params = {}
    for name, group in (("weft", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)),
                    process_group=group)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(100 + rank)
        for _ in range(10):
            x, y = torch.randn(16, 32, generator=gen), torch.randn(16, 8, generator=gen)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        params[name] = [p.detach().clone() for p in model.parameters()]
    worst = max((a - b).abs().max().item() for a, b in zip(params["weft"], params["gloo"]))
    assert worst <= 1e-6, "DDP: parameters differ from gloo's by %g on rank %d" % (worst, rank)
    dist.destroy_process_group()
    if rank == 0:
        print("mpirun, %d ranks: collectives equal to gloo's, DDP within %g of gloo's after 10 steps" % (world, worst))
    return 0


if __name__ == "__main__":
    if "OMPI_COMM_WORLD_RANK" not in os.environ:
        sys.exit(launch(int(sys.argv[1]) if len(sys.argv) > 1 else 2, sys.argv[2] if len(sys.argv) > 2 else None))
    if len(sys.argv) > 1:  # another torch test, as torchrun would run it
        torchrun_variables()
        sys.path.insert(0, os.path.dirname(sys.argv[1]))
        sys.argv = sys.argv[1:]
        runpy.run_path(sys.argv[0], run_name="__main__")
        sys.exit(0)
    sys.exit(rank_main())
