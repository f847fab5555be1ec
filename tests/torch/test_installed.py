"""An installed weft registers "weft" with torch by itself: `import torch` loads it through the
"torch.backends" entry point, and the group runs on the installed weft._c10d and libweft.

    .venv/bin/python tests/torch/test_installed.py BUILD_DIR

`meson install --destdir` puts the install in a scratch directory; the only help the child gets is where
that directory moved libweft to (WEFT_LIBRARY, LD_LIBRARY_PATH for weft._c10d's rpath). It does not get the
checkout's package or build: PYTHONPATH is the installed site directory alone.
"""

import glob
import os
import subprocess
import sys
import sysconfig
import tempfile

CHILD = r"""
import os, sys
import torch
import torch.distributed as dist
registered = "weft" in dist.Backend.backend_list
print("registered", registered, "by", "weft._backend" in sys.modules)
if os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0":
    sys.exit(0 if not registered else 3)
if not registered:
    sys.exit(2)
dist.init_process_group("weft", store=dist.HashStore(), rank=0, world_size=1)
t = torch.arange(7, dtype=torch.int64)
dist.all_reduce(t)
assert t.tolist() == list(range(7)), t
module = sys.modules["weft._c10d"].__file__
print("module", module)
assert module.startswith(os.environ["EXPECT_SITE"]), module
dist.destroy_process_group()
print("ok")
"""


def main():
    build = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="weft-install-") as dest:
        subprocess.run(["meson", "install", "-C", build, "--no-rebuild", "--destdir", dest, "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
        # The install lands under the venv's own path, which begins with a dot: walk, as glob's ** skips it.
        found = [os.path.join(d, f) for d, _, files in os.walk(dest) for f in files]
        inits = [p for p in found if p.endswith(os.path.join(os.sep, "weft", "__init__.py"))]
        libs = [p for p in found if os.path.basename(p) == "libweft.so.0"]
        assert len(inits) == 1 and len(libs) == 1, (inits, libs)
        site = os.path.dirname(os.path.dirname(inits[0]))
        libdir = os.path.dirname(libs[0])
        # The installed package goes into the environment of the interpreter weft was built for (.venv/),
        # where its torch looks for entry points, and it records where libweft went.
        want_site = sysconfig.get_paths()["purelib"]
        assert os.path.realpath(site) == os.path.realpath(dest + want_site), (site, want_site)
        assert glob.glob(os.path.join(site, "weft-*.dist-info", "entry_points.txt")), site
        assert glob.glob(os.path.join(site, "weft", "_c10d*.so")), site
        recorded = {}
        exec(open(os.path.join(site, "weft", "_install_dir.py")).read(), recorded)
        assert os.path.realpath(dest + recorded["LIBDIR"]) == os.path.realpath(libdir), (recorded["LIBDIR"], libdir)

        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "WEFT_C10D_MODULE", "WEFT_LIBRARY", "TORCH_DEVICE_BACKEND_AUTOLOAD")}
        env.update(PYTHONPATH=site, WEFT_LIBRARY=libs[0], LD_LIBRARY_PATH=libdir, EXPECT_SITE=site,
                   WEFT_SOCKET_IFNAME="lo")
        for autoload in (None, "0"):
            if autoload is not None:
                env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = autoload
            r = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=dest, capture_output=True, text=True,
                               timeout=120)
            sys.stdout.write(r.stdout)
            if r.returncode != 0:
                sys.stderr.write(r.stderr)
                raise SystemExit("installed weft, TORCH_DEVICE_BACKEND_AUTOLOAD=%s: exit %d" % (autoload, r.returncode))
    print("installed weft: registered by `import torch`, ran a group, and stayed off with autoload off")


if __name__ == "__main__":
    main()
