"""The peers bench/peers/run measures, and how each is found and launched.

A peer is a library's collectives on the same ranks and buffers: weft
through weft-bench (its MPI and UCX backends), Open MPI's own collectives
(coll tuned, coll han) and oneCCL through bench/peers' own programs, torch's
gloo through bench/peers/gloo.py. Each launch writes JSON rows that
results.py reads; `missing()` says why a peer cannot run here, or None.
"""
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV = os.path.join(HERE, ".venv")          # oneCCL and Intel MPI, from bench/peers/install
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
INSTALL = "bench/peers/install"

# oneCCL's settings for ranks on one node, chosen by the sweep recorded in
# bench/results/peers.md: its MPI transport over Intel MPI's shared memory,
# and progress on the calling thread (a worker thread per rank, the default,
# starves the ranks of a 2-core machine: 15 ms per 4 KiB all-reduce).
ONECCL_ENV = {"CCL_ATL_TRANSPORT": "mpi", "I_MPI_FABRICS": "shm", "CCL_WORKER_OFFLOAD": "0",
              "CCL_LOG_LEVEL": "error"}


class Peer:
    name = ""
    has = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "alltoall")

    def __init__(self, ctx):
        self.ctx = ctx

    def missing(self):
        return None

    def mpirun(self, np, extra=()):
        return ["mpirun", "-np", str(np), "--oversubscribe", *self.ctx.mpirun_args, *extra]


class WeftBench(Peer):
    """weft-bench, one launch per collective; its own -c 1 checks every element."""

    def __init__(self, ctx, backend):
        super().__init__(ctx)
        self.backend = backend
        self.name = "weft-" + backend
        self.exe = os.path.join(ctx.build, "bench", "weft-bench")

    def missing(self):
        if not os.access(self.exe, os.X_OK):
            return f"{self.exe} is not built (meson setup {self.ctx.build} && ninja -C {self.ctx.build})"
        probe = subprocess.run([self.exe, "all_reduce", "--backend", self.backend, "-b", "8", "-e", "8", "-n", "1",
                                "-w", "0"], capture_output=True, text=True, env=dict(os.environ, **ROOT_ENV),
                               timeout=60)
        if probe.returncode != 0:
            return f"weft-bench --backend {self.backend} fails alone: {probe.stderr.strip()[-200:]}"
        return None

    def commands(self, np, band, collectives, out):
        for c in collectives:
            yield c, self.mpirun(np) + [self.exe, c, "--backend", self.backend, *band.flags(), "-c", "1",
                                        "--json", f"{out}.{c}.json"]


class MpiColl(Peer):
    """Open MPI's collectives through bench/peers/mpi_peer.cc; `component` picks coll tuned or han."""

    def __init__(self, ctx, component):
        super().__init__(ctx)
        self.component = component
        self.name = "ompi-" + component
        self.exe = os.path.join(ctx.build, "bench", "peers", "weft-peers-mpi")

    def missing(self):
        if not os.access(self.exe, os.X_OK):
            return f"{self.exe} is not built (ninja -C {self.ctx.build})"
        if self.component == "han":
            info = subprocess.run(["ompi_info"], capture_output=True, text=True).stdout
            if "MCA coll: han" not in info:
                return "this Open MPI has no coll han component"
        return None

    def commands(self, np, band, collectives, out):
        mca = ["--mca", "coll_han_priority", "100"] if self.component == "han" else []
        yield None, self.mpirun(np, mca) + [self.exe, *band.flags(), "--collectives", ",".join(collectives),
                                            "--out", out] + self.ctx.corrupt_flag(self.name)


class OneCcl(Peer):
    """oneCCL through bench/peers/oneccl_peer.cc, compiled here against bench/peers/.venv."""

    name = "oneccl"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.exe = os.path.join(HERE, ".build", "weft-peers-oneccl")
        self.impi = os.path.join(VENV, "bin", "mpiexec")

    def missing(self):
        lib = os.path.join(VENV, "lib")
        need = [os.path.join(VENV, "include", "oneapi", "ccl.hpp")] + [
            os.path.join(lib, f) for f in ("libccl.so.1", "libccl.so.2", "libintlc.so.5")]
        absent = [p for p in need if not os.path.exists(p)]
        if absent:
            return f"oneCCL is not installed ({os.path.relpath(absent[0], ROOT)} missing): run {INSTALL}"
        return self.build()

    def build(self):
        """Compiles the program when its sources are newer than it; returns why it failed, or None."""
        srcs = [os.path.join(HERE, f) for f in ("peer.cc", "peer.h", "oneccl_peer.cc")]
        if os.path.exists(self.exe) and all(os.path.getmtime(s) < os.path.getmtime(self.exe) for s in srcs):
            return None
        os.makedirs(os.path.dirname(self.exe), exist_ok=True)
        lib = os.path.join(VENV, "lib")
        cmd = [os.environ.get("CXX", "g++"), "-O2", "-std=c++17", "-I" + ROOT, "-I" + os.path.join(VENV, "include"),
               srcs[0], srcs[2], "-L" + lib, "-lccl", "-lintlc", "-Wl,-rpath," + lib, "-o", self.exe]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            return f"building the oneCCL program failed: {done.stderr.strip()[-400:]}"
        return None

    def commands(self, np, band, collectives, out):
        env = dict(ONECCL_ENV, WEFT_PEERS_KVS=f"{out}.kvs", **self.ctx.oneccl_env)
        args = [self.exe, *band.flags(), "--collectives", ",".join(collectives), "--out", out]
        args += self.ctx.corrupt_flag(self.name)
        if env.get("CCL_ATL_TRANSPORT") == "mpi":
            if not os.access(self.impi, os.X_OK):
                raise RuntimeError(f"CCL_ATL_TRANSPORT=mpi needs Intel MPI in bench/peers/.venv: run {INSTALL}")
            env["I_MPI_ROOT"] = VENV
            env["LD_LIBRARY_PATH"] = os.path.join(VENV, "lib")
            yield None, ["env", *[f"{k}={v}" for k, v in env.items()], self.impi, "-n", str(np)] + args
        else:
            xs = [a for k, v in env.items() for a in ("-x", f"{k}={v}")]
            yield None, self.mpirun(np, xs) + args


class Gloo(Peer):
    """torch.distributed's gloo backend through bench/peers/gloo.py, with the checkout's .venv python."""

    name = "gloo"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.python = os.path.join(ROOT, ".venv", "bin", "python")

    def missing(self):
        if not os.access(self.python, os.X_OK):
            return ".venv/bin/python is missing (tools/setup makes it)"
        probe = subprocess.run([self.python, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            return f"torch with gloo is not importable from .venv: {probe.stderr.strip()[-200:]}"
        return None

    def commands(self, np, band, collectives, out):
        yield None, self.mpirun(np) + [self.python, os.path.join(HERE, "gloo.py"), *band.flags(), "--collectives",
                                       ",".join(collectives), "--out", out, "--init-file", f"{out}.store"] + \
            self.ctx.corrupt_flag(self.name)


def all_peers(ctx):
    return [WeftBench(ctx, "mpi"), WeftBench(ctx, "ucx"), MpiColl(ctx, "tuned"), MpiColl(ctx, "han"), OneCcl(ctx),
            Gloo(ctx)]


def mpirun_found():
    return shutil.which("mpirun") is not None
