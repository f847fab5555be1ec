"""The weft wheel as a user installs it: built as `pip wheel .`, installed into a venv with the pinned torch
alone, and used from outside the checkout.

    .venv/bin/python tests/install/test_wheel.py SOURCE TREE WORK VERSION

  1. builds the wheel (wheel.py: meson-python's tree TREE, kept for incremental rebuilds) and checks
     readelf's NEEDED lists (elf.py);
  2. installs it into WORK/run-env (venvs.py: torch and its requirements only), with its dependencies from the
     registry (libucx-cu13), and checks that `pip list` then holds nothing else and `pip check` passes;
  3. from cwd /, with no WEFT_LIBRARY, PYTHONPATH or LD_LIBRARY_PATH: `import weft, weft.torch` loads the
     installed package at VERSION, and `torchrun --nproc_per_node 2` of a script that never imports weft runs
     dist.init_process_group("weft") (registered by `import torch` through the entry point) and all_reduce,
     whose values both ranks report, on the libucp of the libucx wheel;
  4. a weft built for another torch minor (its recorded build torch changed) fails `import weft.torch` naming
     both versions, and under `import torch` is a warning naming both, not an error;
  5. a libucp that cannot be loaded (WEFT_UCX_LIBRARY naming a missing file) is an error naming the UCX
     backend and the file on both ranks of a world.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import elf  # noqa: E402
import venvs  # noqa: E402
import wheel as wheel_build  # noqa: E402

RANK_SCRIPT = r"""
import json, os, sys
import torch
import torch.distributed as dist
# Registered by `import torch` through weft's "torch.backends" entry point: this script never imports weft.
registered = "weft" in dist.Backend.backend_list
dist.init_process_group("weft")
rank, n = dist.get_rank(), dist.get_world_size()
t = torch.arange(16, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
maps = open("/proc/self/maps").read()
ucp = sorted({l.split()[-1] for l in maps.splitlines() if "libucp.so" in l})
import weft
with open(os.path.join(os.environ["RESULT_DIR"], "rank%d.json" % rank), "w") as f:
    json.dump({"rank": rank, "n": n, "registered": registered, "values": t.tolist(), "ucp": ucp,
               "weft": weft.__file__}, f)
dist.destroy_process_group()
"""

UCX_MISSING_SCRIPT = r"""
import sys, weft
try:
    weft.init()
except weft.WeftError as e:
    print("ERROR " + str(e), flush=True)
    sys.exit(3)
sys.exit(0)
"""


class Failure(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failure(what)


def clean_env(**extra):
    """The environment of a user's shell: none of the checkout's or the build's help."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WEFT_", "TORCH_")) and k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def run(cmd, timeout=900, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def install(wheel, run_env):
    python = os.path.join(run_env, "bin", "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # First with its dependencies (torch is there already; libucx-cu13 comes from the registry once), then
    # the freshly built file over a previous install of the same version.
    for args in ([wheel], ["--force-reinstall", "--no-deps", wheel]):
        r = run(pip + args)
        expect(r.returncode == 0, "pip install %s failed:\n%s%s" % (" ".join(args), r.stdout, r.stderr))
    r = run([python, "-m", "pip", "check"])
    expect(r.returncode == 0, "pip check in the run venv: %s%s" % (r.stdout, r.stderr))
    r = run([python, "-m", "pip", "list", "--format", "json"])
    have = {venvs._key(p["name"]) for p in json.loads(r.stdout)}
    want = set(venvs.closure("torch")) | {"weft", "libucx-cu13", "pip", "setuptools"}
    expect(have == want, "the run venv holds %s beyond torch, weft and libucx-cu13, and lacks %s" %
           (sorted(have - want), sorted(want - have)))
    return python


def check_import(python, version, site):
    r = run([python, "-c", "import weft, weft.torch; print(weft.__version__); print(weft.__file__); "
             "print(weft.library_version())"], cwd="/", env=clean_env())
    expect(r.returncode == 0, "import weft, weft.torch from / failed:\n%s" % r.stderr)
    got_version, path, code = r.stdout.split()
    expect(got_version == version, "weft.__version__ is %s, not the project's %s" % (got_version, version))
    major, minor, patch = (int(x) for x in version.split("."))
    expect(int(code) == major * 10000 + minor * 100 + patch,
           "weftGetVersion says %s, not %s" % (code, version))
    expect(path.startswith(site), "weft was imported from %s, not the run venv's %s" % (path, site))
    print("import weft, weft.torch from /: weft %s at %s, weftGetVersion %s" % (got_version, path, code))


def check_torchrun(run_env, site, scratch):
    script = os.path.join(scratch, "all_reduce.py")
    with open(script, "w") as f:
        f.write(RANK_SCRIPT)
    torchrun = os.path.join(run_env, "bin", "torchrun")
    out = os.path.join(scratch, "results")
    os.makedirs(out)
    r = run([torchrun, "--standalone", "--nproc_per_node", "2", script], cwd="/",
            env=clean_env(WEFT_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", RESULT_DIR=out), timeout=900)
    results = [json.load(open(os.path.join(out, f))) for f in sorted(os.listdir(out))]
    expect(r.returncode == 0 and len(results) == 2, "torchrun of 2 ranks: exit %d, %d results\n%s%s" %
           (r.returncode, len(results), r.stdout[-4000:], r.stderr[-8000:]))
    want = [3.0 * i for i in range(16)]  # ranks contribute 1x and 2x arange(16)
    libucx = os.path.join(site, "libucx", "lib")
    for res in sorted(results, key=lambda x: x["rank"]):
        expect(res["n"] == 2, "rank %d saw a world of %d" % (res["rank"], res["n"]))
        expect(res["registered"], "rank %d: 'weft' was not registered by `import torch`" % res["rank"])
        expect(res["values"] == want, "rank %d: all_reduce gave %s, want %s" % (res["rank"], res["values"], want))
        expect(res["weft"].startswith(site), "rank %d ran the weft at %s" % (res["rank"], res["weft"]))
        expect(res["ucp"] and all(p.startswith(libucx) for p in res["ucp"]),
               "rank %d loaded libucp from %s, not the libucx wheel's %s" % (res["rank"], res["ucp"], libucx))
    print("torchrun --nproc_per_node 2 from /: both ranks all_reduced %s... on %s" % (want[:4], results[0]["ucp"]))


def check_torch_mismatch(python, site, scratch):
    # The installed package with its recorded build torch changed: what a wheel built for torch 2.10 holds.
    copy = os.path.join(scratch, "mismatch")
    for d in ("weft", "weft.libs"):  # weft.libs: the libraries auditwheel copied in, on libweft's RPATH
        if os.path.isdir(os.path.join(site, d)):
            shutil.copytree(os.path.join(site, d), os.path.join(copy, d))
    with open(os.path.join(copy, "weft", "_c10d_torch.py"), "w") as f:
        f.write('TORCH = "2.10"\n')
    env = clean_env(PYTHONPATH=copy)
    r = run([python, "-c", "import weft.torch"], cwd="/", env=env)
    running = run([python, "-c", "import torch; print(torch.__version__)"], cwd="/", env=clean_env()).stdout.strip()
    expect(r.returncode != 0 and "ImportError" in r.stderr, "import weft.torch under another torch did not fail:\n"
           "%s%s" % (r.stdout, r.stderr))
    last = r.stderr.strip().splitlines()[-1]
    expect("torch 2.10" in last and "torch %s" % running in last,
           "the error does not name both torch 2.10 and torch %s: %s" % (running, last))
    print("built for torch 2.10, under %s: %s" % (running, last))
    r = run([python, "-c", "import torch, torch.distributed as d; print('weft' in d.Backend.backend_list)"], cwd="/",
            env=env)
    expect(r.returncode == 0 and r.stdout.strip() == "False",
           "import torch with a mismatched weft installed: exit %d, registered %s\n%s" %
           (r.returncode, r.stdout.strip(), r.stderr))
    expect("torch 2.10" in r.stderr and "torch %s" % running in r.stderr,
           "import torch warned without naming both versions: %s" % r.stderr)
    print("import torch with it: a warning naming both, 'weft' not registered")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_ucx_missing(python):
    missing = "/nonexistent/libucp.so.0"
    port = free_port()
    procs = [subprocess.Popen([python, "-c", UCX_MISSING_SCRIPT], cwd="/", stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=clean_env(WEFT_RANK=str(r), WEFT_WORLD_SIZE="2", WEFT_ROOT="127.0.0.1:%d" % port,
                                            WEFT_UCX_LIBRARY=missing, WEFT_SOCKET_IFNAME="lo",
                                            WEFT_BOOTSTRAP_TIMEOUT_MS="60000"))
             for r in range(2)]
    for rank, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        expect(p.returncode == 3, "rank %d with WEFT_UCX_LIBRARY=%s: exit %d\n%s%s" % (rank, missing, p.returncode,
                                                                                     out, err))
        msg = out.split("ERROR ", 1)[1].strip()
        expect("UCX backend" in msg and missing in msg, "rank %d's error names neither the backend nor %s: %s" %
               (rank, missing, msg))
        expect("Traceback" not in err, "rank %d printed a trace:\n%s" % (rank, err))
    print("a world with libucp missing: %s" % msg)


def main():
    source, tree, work = (os.path.abspath(p) for p in sys.argv[1:4])
    version = sys.argv[4]
    os.makedirs(os.path.join(work, "wheel"), exist_ok=True)
    wheel = wheel_build.build(source, tree, os.path.join(work, "wheel"))
    print("built %s" % os.path.basename(wheel))
    problems = elf.check(wheel)
    expect(not problems, "readelf: " + "; ".join(problems))
    expect(os.path.basename(wheel).startswith("weft-%s-cp" % version),
           "the wheel %s is not weft %s" % (os.path.basename(wheel), version))
    run_env = os.path.join(work, "run-env")
    venvs.seed(run_env)
    python = install(wheel, run_env)
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"]).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="weft-wheel-") as scratch:
        check_import(python, version, site)
        check_torchrun(run_env, site, scratch)
        check_torch_mismatch(python, site, scratch)
        check_ucx_missing(python)
    print("the wheel installs, imports, runs torchrun's 2 ranks and names what it lacks")


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print("test_wheel.py: FAILED: %s" % e)
        sys.exit(1)
