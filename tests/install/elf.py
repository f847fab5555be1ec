"""What the wheel's shared objects need from the machine: readelf's NEEDED, SONAME and RUNPATH of each.

    python tests/install/elf.py WHEEL [--cuda]

Every NEEDED must be a file inside the wheel (which the RUNPATH, relative to $ORIGIN, must reach), one of
glibc's and GCC's runtime libraries that every Linux has, or torch's (the torch the wheel requires loads them at
`import torch`); with --cuda also CUDA's runtime and NCCL (the nvidia wheels torch requires). Anything else,
libucp, libmpi or Abseil among them, fails: it would make the wheel depend on a system package.
"""

import os
import re
import subprocess
import sys
import tempfile
import zipfile

SYSTEM = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libpthread.so.0",
          "libdl.so.2", "librt.so.1"}
TORCH = {"libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so"}
CUDA = {"libcudart.so.13", "libnccl.so.2"}


def dynamic(path):
    out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout
    fields = {"NEEDED": [], "SONAME": [], "RUNPATH": [], "RPATH": []}
    for kind, value in re.findall(r"\((NEEDED|SONAME|RUNPATH|RPATH)\)\s+[^\[]*\[([^\]]*)\]", out):
        fields[kind].append(value)
    return fields


def check(wheel, cuda=False):
    """The problems found, as lines; also prints each object's NEEDED list."""
    allowed = SYSTEM | TORCH | (CUDA if cuda else set())
    problems = []
    with tempfile.TemporaryDirectory() as d:
        zipfile.ZipFile(wheel).extractall(d)
        objects = []
        for root, _, files in os.walk(d):
            objects += [os.path.join(root, f) for f in files if re.search(r"\.so(\.\d+)*$", f)]
        by_name = {}
        for o in objects:
            by_name.setdefault(os.path.basename(o), []).append(o)
        names = {os.path.basename(o) for o in objects}
        if "libweft.so.0" not in names:
            problems.append("the wheel holds no libweft.so.0 (it has %s)" % sorted(names))
        for o in sorted(objects):
            rel = os.path.relpath(o, d)
            f = dynamic(o)
            if not rel.startswith("weft.libs"):  # the copied libraries are checked, not listed
                print("%s: NEEDED %s RUNPATH %s" % (rel, " ".join(f["NEEDED"]), ":".join(f["RUNPATH"] + f["RPATH"])))
            if os.path.basename(o) == "libweft.so.0" and f["SONAME"] != ["libweft.so.0"]:
                problems.append("%s has SONAME %s, not libweft.so.0" % (rel, f["SONAME"]))
            dirs = [p.replace("$ORIGIN", os.path.dirname(o)) for r in f["RUNPATH"] + f["RPATH"] for p in r.split(":")]
            for lib in f["NEEDED"]:
                if lib in allowed:
                    continue
                if lib not in names:
                    problems.append("%s needs %s, which is neither in the wheel nor a system runtime library" %
                                    (rel, lib))
                elif not any(os.path.exists(os.path.join(p, lib)) for p in dirs):
                    problems.append("%s needs %s, which is in the wheel but not on its RUNPATH %s" %
                                    (rel, lib, f["RUNPATH"] + f["RPATH"]))
    print("%d libraries copied in beside them" % sum(1 for o in objects if "weft.libs" in o))
    return problems


def main():
    problems = check(sys.argv[1], "--cuda" in sys.argv[2:])
    for p in problems:
        print("elf.py: " + p)
    if problems:
        raise SystemExit(1)
    print("elf.py: every NEEDED of the wheel resolves inside it or against the system's runtime libraries")


if __name__ == "__main__":
    main()
