"""Builds the weft wheel as `pip wheel --no-build-isolation .` does, incrementally, then makes it portable.

    .venv/bin/python tests/install/wheel.py SOURCE TREE WORK [setup args...]   # prints the repaired wheel's path

The interpreter running this is the build environment: its torch is the one weft._c10d is compiled against.
python/requirements-build.txt (meson-python, meson, auditwheel) is installed once into WORK/tools, which is put
on PYTHONPATH and PATH rather than into that environment. TREE is meson-python's build directory, kept between
runs so a rebuild is incremental. auditwheel then copies the libraries libweft needs beyond glibc and libstdc++
(Abseil's) into the wheel (WORK/wheelhouse) and points the RPATHs at them; torch's libraries, which weft._c10d
links, are left to the torch the wheel requires, as are CUDA's and NCCL's (its nvidia wheels).
"""

import glob
import os
import shutil
import subprocess
import sys

# Provided by the torch distribution the wheel requires (loaded by `import torch`), never copied in.
TORCH_LIBS = ["libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so",
              "libtorch_python.so"]
# CUDA's and NCCL's come from the nvidia wheels torch requires (a -Dcuda=enabled wheel).
CUDA_LIBS = ["libcudart.so.13", "libnccl.so.2"]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-20000:] + r.stderr[-20000:])
        raise SystemExit("wheel.py: %s failed with exit %d" % (" ".join(cmd[:6]), r.returncode))
    return r


def tools(source, work):
    """WORK/tools with python/requirements-build.txt installed (again only when that file changes)."""
    reqs = os.path.join(source, "python", "requirements-build.txt")
    target = os.path.join(work, "tools")
    stamp = os.path.join(target, "requirements-build.txt")
    if not (os.path.exists(stamp) and open(stamp).read() == open(reqs).read()):
        shutil.rmtree(target, ignore_errors=True)
        run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", target,
             "-r", reqs])
        shutil.copy(reqs, stamp)
    return target


def build(source, tree, work, setup_args=()):
    target = tools(source, work)
    env = dict(os.environ, PATH=os.path.join(target, "bin") + os.pathsep + os.environ["PATH"], PYTHONPATH=target)
    dist, house = os.path.join(work, "dist"), os.path.join(work, "wheelhouse")
    for d in (dist, house):
        shutil.rmtree(d, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-build-isolation",
           "--no-deps", "-w", dist, "--config-settings=build-dir=" + tree]
    cmd += ["--config-settings=setup-args=" + a for a in setup_args]
    run(cmd + [source], env=env, cwd=work)
    (raw,) = glob.glob(os.path.join(dist, "weft-*.whl"))
    repair = [os.path.join(target, "bin", "auditwheel"), "repair", "-w", house, "--plat", "auto"]
    for lib in TORCH_LIBS + CUDA_LIBS:
        repair += ["--exclude", lib]
    run(repair + [raw], env=env, cwd=work)
    (wheel,) = glob.glob(os.path.join(house, "weft-*.whl"))
    return wheel


def main():
    a = [os.path.abspath(p) for p in sys.argv[1:4]]
    os.makedirs(a[2], exist_ok=True)
    print(build(a[0], a[1], a[2], sys.argv[4:]))


if __name__ == "__main__":
    main()
