"""The virtual environment the install tests install the wheel into, kept between runs.

    .venv/bin/python tests/install/venvs.py DIR      # DIR: a venv with the pinned torch alone

Run by the checkout's .venv interpreter, whose torch (python/requirements.txt's pin) is the one put in. pip
would download torch and its CUDA libraries again (about 3 GiB: the registry's files are not kept in pip's
cache here), so the files of torch's installed distribution and of every distribution it requires are linked
(hard links: no copies, seconds) into the new venv's site-packages, with their dist-info, and console scripts
written for its interpreter. The result is what `pip install torch==X` gives: `pip list` shows torch and its
requirements only, and `pip check` passes (the tests check both). A venv whose distributions still match is
reused; one that does not is made again.
"""

import importlib.metadata as md
import os
import shutil
import subprocess
import sys

from packaging.requirements import Requirement

STAMP = "weft-seeded.txt"


def _key(name):
    return name.lower().replace("_", "-")


def closure(name):
    """`name` and every distribution it requires (with the extras asked for), as installed here, by name."""
    extras_of, dists, todo = {}, {}, [(name, frozenset())]
    while todo:
        want, extras = todo.pop()
        key = _key(want)
        had = extras_of.get(key)
        if had is not None and extras <= had:
            continue
        extras_of[key] = (had or frozenset()) | extras
        dist = dists.setdefault(key, md.distribution(want))
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("",) + tuple(extras_of[key])):
                todo.append((req.name, frozenset(req.extras)))
    return dists


def _console_scripts(dist, bindir, python):
    for ep in dist.entry_points:
        if ep.group != "console_scripts":
            continue
        module, _, attr = ep.value.partition(":")
        path = os.path.join(bindir, ep.name)
        with open(path, "w") as f:
            f.write("#!%s\nimport sys\nfrom %s import %s\nsys.exit(%s())\n" % (python, module, attr.split(".")[0],
                                                                             attr))
        os.chmod(path, 0o755)


def _link_dist(dist, site):
    src_site = str(dist.locate_file(""))
    for f in dist.files or []:
        rel = os.path.normpath(str(f))
        if rel.startswith("..") or "__pycache__" in rel:  # scripts (written anew below), byte code
            continue
        src, dst = os.path.join(src_site, rel), os.path.join(site, rel)
        if not os.path.exists(src):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)


def seed(target):
    dists = closure("torch")
    want = "\n".join(sorted("%s==%s" % (k, d.version) for k, d in dists.items()))
    stamp = os.path.join(target, STAMP)
    if os.path.exists(stamp) and open(stamp).read() == want:
        return
    shutil.rmtree(target, ignore_errors=True)
    # The interpreter .venv was made from, so the distributions' compiled modules fit it.
    subprocess.run([sys._base_executable, "-m", "venv", target], check=True)
    python = os.path.join(target, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    for d in dists.values():
        _link_dist(d, site)
        _console_scripts(d, os.path.join(target, "bin"), python)
    with open(stamp, "w") as f:
        f.write(want)


def main():
    target = os.path.abspath(sys.argv[1])
    seed(target)
    print(target)


if __name__ == "__main__":
    main()
