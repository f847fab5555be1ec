#!/usr/bin/python3
"""The package's one table of C declarations (weft._lib.SIGNATURES) against
the headers and the package: every weft* function the package calls is in
the table and every entry is called; each entry's restype and argtypes
match the header's prototype, argument by argument; the ctypes structs
mirror the C structs field for field at the ABI's frozen sizes; and the
reducer defaults equal WEFT_REDUCER_CONFIG_INITIALIZER's."""

import ctypes
import glob
import os
import re
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import weft  # noqa: E402,F401
from weft import _lib  # noqa: E402

HEADERS = sorted(glob.glob(os.path.join(ROOT, "include", "weft", "*.h")))
PACKAGE = sorted(glob.glob(os.path.join(ROOT, "python", "weft", "*.py")))


def read(path):
    with open(path) as f:
        return f.read()


def header_text():
    text = "\n".join(read(h) for h in HEADERS)
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


TEXT = header_text()
HANDLES = set(re.findall(r"typedef struct \w+\s*\*\s*(\w+);", TEXT))
ENUMS = set(re.findall(r"}\s*(\w+_t);", TEXT)) - set(re.findall(r"typedef struct\s*{[^}]*}\s*(\w+);", TEXT))
STRUCTS = {"weftTensor_t": _lib.Tensor, "weftConfig_t": _lib.Config, "weftReducerConfig_t": _lib.ReducerConfig,
           "weftParamDesc_t": _lib.ParamDesc, "weftShardGroupConfig_t": _lib.ShardGroupConfig,
           "weftShardDesc_t": _lib.ShardDesc, "weftShardMemory_t": _lib.ShardMemory,
           "weftShardScheduleConfig_t": _lib.ScheduleConfig, "weftKernelConfig_t": _lib.KernelConfig}
SCALARS = {"int": ctypes.c_int, "unsignedint": ctypes.c_uint, "size_t": ctypes.c_size_t, "float": ctypes.c_float,
           "int64_t": ctypes.c_int64}


def prototypes():
    found = {}
    for ret, name, params in re.findall(r"(weftResult_t|const char\s*\*)\s*(weft\w+)\s*\(([^)]*)\)\s*;", TEXT):
        params = " ".join(params.split())
        found[name] = (ret.replace(" ", ""), [] if params == "void" else [p.strip() for p in params.split(",")])
    return found


def c_type(param):
    """A parameter's type without its name and qualifiers, e.g. 'float**', 'weftComm_t'."""
    words = param.replace("*", " * ").split()
    if len(words) > 1 and words[-1] != "*":
        words = words[:-1]  # the name
    return "".join(w for w in words if w != "const")


def matches(ctype_name, ct):
    """Whether ctypes type ct can carry C type ctype_name."""
    if ctype_name.endswith("*"):
        if ct is ctypes.c_void_p:
            return True
        if ct is ctypes.c_char_p:
            return ctype_name == "char*"
        if not hasattr(ct, "_type_") or not isinstance(ct._type_, type):
            return False
        return matches(ctype_name[:-1], ct._type_)
    if ctype_name in HANDLES:
        return ct is ctypes.c_void_p
    if ctype_name in ENUMS:
        return ct is ctypes.c_int
    if ctype_name in STRUCTS:
        return ct is STRUCTS[ctype_name]
    return SCALARS.get(ctype_name) is ct


def used_names():
    names = set()
    for path in PACKAGE:
        src = read(path)
        if path.endswith("_lib.py"):
            src = src[src.index("def check("):]  # the uses, not the table
        names |= set(re.findall(r"\bweft[A-Z]\w+", src))
    return names


class Table(unittest.TestCase):
    def test_every_call_is_declared_and_every_entry_is_called(self):
        used = {n for n in used_names() if n in prototypes()}
        self.assertEqual(sorted(used - set(_lib.SIGNATURES)), [], "called but not in SIGNATURES")
        self.assertEqual(sorted(set(_lib.SIGNATURES) - used), [], "in SIGNATURES but never called")

    def test_kernels_are_bound(self):
        # The Ex forms: weft.kernels checks that every tensor is host memory and states it.
        for name in ("weftFlattenEx", "weftUnflattenEx", "weftUnscaleCheckFiniteEx", "weftL2NormEx", "weftChunkCatEx",
                     "weftChunkSplitEx"):
            self.assertIn(name, _lib.SIGNATURES)

    def test_entries_match_the_headers(self):
        protos = prototypes()
        self.assertGreater(len(protos), 80)
        for name, (restype, argtypes) in _lib.SIGNATURES.items():
            self.assertIn(name, protos, "%s is not declared in include/weft" % name)
            ret, params = protos[name]
            self.assertIs(restype, ctypes.c_char_p if ret == "constchar*" else ctypes.c_int, name)
            self.assertEqual(len(argtypes), len(params), "%s: %d argtypes, the header has %s" % (name, len(argtypes), params))
            for i, (p, ct) in enumerate(zip(params, argtypes)):
                self.assertTrue(matches(c_type(p), ct), "%s argument %d: %s declared as %r" % (name, i + 1, p, ct))
            fn = getattr(_lib.lib, name)
            self.assertIs(fn.restype, restype)
            self.assertEqual(fn.argtypes, argtypes)

    def test_tag_range_is_the_headers(self):
        self.assertEqual(weft.comm.TAG_MAX, int(re.search(r"#define WEFT_TAG_MAX (\d+)", TEXT).group(1)))

    def test_undeclared_call_is_refused(self):
        with self.assertRaisesRegex(AttributeError, "weftCommAbort is not declared"):
            _lib.call("weftCommAbort", None)


def c_fields(struct):
    body = re.search(r"typedef struct\s*{([^}]*)}\s*%s;" % struct, TEXT).group(1)
    names = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        fn = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)
        names.append(fn.group(1) if fn else re.search(r"(\w+)\s*(\[[^]]*\])?$", decl).group(1))
    return names


class Structs(unittest.TestCase):
    FROZEN = {"weftConfig_t": 56, "weftReducerConfig_t": 56, "weftShardGroupConfig_t": 24,
              "weftShardScheduleConfig_t": 48, "weftTensor_t": 24, "weftParamDesc_t": 80, "weftShardDesc_t": 24,
              "weftShardMemory_t": 48, "weftKernelConfig_t": 16}

    def test_ctypes_structs_mirror_the_headers(self):
        for cname, py in STRUCTS.items():
            self.assertEqual([f[0] for f in py._fields_], c_fields(cname), cname)
            self.assertEqual(ctypes.sizeof(py), self.FROZEN[cname], cname)

    def test_versioned_structs_carry_the_current_size(self):
        self.assertEqual(_lib.Config().size, 56)
        self.assertEqual(_lib.ReducerConfig().size, 56)

    def test_reducer_defaults_are_the_initializer(self):
        native = int(re.search(r"#define WEFT_REDUCER_COMM_DTYPE_NATIVE \((-?\d+)\)", TEXT).group(1))
        init = re.search(r"#define WEFT_REDUCER_CONFIG_INITIALIZER\s*\\\s*{([^}]*)}", TEXT).group(1)
        items = [i.strip() for i in init.split(",")]
        values = []
        for item in items[1:-1]:  # between sizeof(...) and names
            item = item.replace("(size_t)", "").replace("WEFT_REDUCER_COMM_DTYPE_NATIVE", str(native))
            m = re.fullmatch(r"(-?\d+)(?:\s*<<\s*(\d+))?", item)
            self.assertIsNotNone(m, item)
            values.append(int(m.group(1)) << int(m.group(2) or 0))
        fields = [f[0] for f in _lib.ReducerConfig._fields_][1:-1]
        self.assertEqual(dict(zip(fields, values)), _lib.REDUCER_DEFAULTS)
        cfg = _lib.ReducerConfig()
        self.assertEqual({f: getattr(cfg, f) for f in fields}, _lib.REDUCER_DEFAULTS)

    def test_dtype_codes_are_the_headers(self):
        """weft.comm's dtype names, indexed by code, are weftDataType_t's enumerators in value order (a type
        appended to the header and not to the package, or the other way round, fails here)."""
        from weft import _tensors
        body = re.search(r"typedef enum\s*{([^}]*)}\s*weftDataType_t;", TEXT).group(1)
        values = {name: int(v) for name, v in re.findall(r"weft(\w+)\s*=\s*(\d+)", body)}
        count = values.pop("NumTypes")
        self.assertEqual(sorted(values.values()), list(range(count)))
        by_value = [name.lower() for name, _ in sorted(values.items(), key=lambda kv: kv[1])]
        self.assertEqual(list(_tensors.DTYPES), by_value)


if __name__ == "__main__":
    unittest.main()
