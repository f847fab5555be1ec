#!/usr/bin/env python3
"""The Python binding in one process: collectives on numpy arrays and torch
tensors over in-process ranks driven from Python threads (ctypes releases the
GIL), the reducer through weft.Reducer, errors, and the library lookup.
Inputs are small integers so every result is exact. Exits 77 without numpy."""

import ctypes
import os
import subprocess
import sys
import threading
import unittest

try:
    import numpy as np
except ImportError as e:
    print("skip: needs .venv/bin/python (tools/setup) with numpy (%s)" % e)
    sys.exit(77)
try:
    import torch
except ImportError:
    torch = None

PYDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.insert(0, PYDIR)
import weft  # noqa: E402


def on_ranks(n, body):
    """Runs body(rank, comm) on n in-process ranks, one thread each; re-raises the first error."""
    comms = weft.init_in_process(n, timeout_ms=20000)
    errors = []

    def run(r):
        try:
            body(r, comms[r])
        except BaseException as e:  # noqa: B902 - reported on the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        if t.is_alive():
            raise TimeoutError("a rank did not finish within 60 s")
    for c in comms:
        c.destroy()
    if errors:
        raise errors[0]


class Collectives(unittest.TestCase):
    def test_numpy_all_reduce_gather_scatter_broadcast(self):
        n = 4

        def body(r, comm):
            self.assertEqual((comm.rank, comm.size), (r, n))
            x = (np.arange(1001, dtype=np.float32) % 7 - 3) * (r + 1)
            comm.all_reduce(x, op="sum")
            np.testing.assert_array_equal(x, (np.arange(1001) % 7 - 3) * 10)
            y = np.full(3, r, dtype=np.int32)
            g = np.full(3 * n, -1, dtype=np.int32)
            comm.all_gather(g, y)
            np.testing.assert_array_equal(g, np.repeat(np.arange(n), 3))
            s = np.arange(2 * n, dtype=np.float64) + r
            out = np.full(2, np.nan)
            comm.reduce_scatter(out, s, op="max")
            np.testing.assert_array_equal(out, np.array([2 * r, 2 * r + 1]) + n - 1)
            b = np.full(5, r, dtype=np.int64)
            comm.broadcast(b, root=2)
            np.testing.assert_array_equal(b, np.full(5, 2))
            comm.barrier()

        on_ranks(n, body)

    @unittest.skipIf(torch is None, "needs torch")
    def test_torch_avg_and_bf16(self):
        def body(r, comm):
            x = torch.arange(64, dtype=torch.float32) * (r + 1)
            comm.all_reduce(x, op="avg")
            self.assertTrue(torch.equal(x, torch.arange(64, dtype=torch.float32) * 1.5))
            h = torch.full((9,), float(r + 1), dtype=torch.bfloat16)
            comm.all_reduce(h, op="sum")
            self.assertTrue(torch.equal(h, torch.full((9,), 3.0, dtype=torch.bfloat16)))

        on_ranks(2, body)

    def test_int16_wraps_as_int16(self):
        """int16 (numpy and torch): sums wrap in 16 bits, avg divides the exact sum, min/max as they are."""
        def body(r, comm):
            x = np.array([30000, -32768, 7, -3], dtype=np.int16)
            comm.all_reduce(x, op="sum")
            np.testing.assert_array_equal(x, np.array([-5536, 0, 14, -6], dtype=np.int16))  # 60000, -65536 wrapped
            a = np.array([30000, -32768, 7, -3], dtype=np.int16)
            comm.all_reduce(a, op="avg")
            np.testing.assert_array_equal(a, np.array([30000, -32768, 7, -3], dtype=np.int16))
            if torch is not None:
                t = torch.tensor([-2 - r, 32767 - r], dtype=torch.int16)
                comm.all_reduce(t, op="min")
                self.assertTrue(torch.equal(t, torch.tensor([-3, 32766], dtype=torch.int16)))

        on_ranks(2, body)

    def test_bad_arguments_raise_with_the_message(self):
        comm = weft.init()
        self.assertEqual(comm.size, 1)
        with self.assertRaisesRegex(weft.WeftError, "root = 5"):
            comm.broadcast(np.zeros(2, dtype=np.float32), root=5)
        with self.assertRaisesRegex(TypeError, "complex64"):
            comm.all_reduce(np.zeros(2, dtype=np.complex64))
        with self.assertRaisesRegex(ValueError, "contiguous"):
            comm.all_reduce(np.zeros((4, 4), dtype=np.float32)[:, 1])


class ReducerFromPython(unittest.TestCase):
    def test_marks_from_threads_in_any_order(self):
        counts = [5, 300, 1, 64, 17]

        def body(r, comm):
            red = weft.Reducer(comm, [(c, np.float32) for c in counts], names=["g%d" % i for i in range(5)],
                               bucket_cap_bytes=512, first_bucket_cap_bytes=128)
            self.assertGreater(red.bucket_count, 1)
            for step in range(3):
                grads = [np.full(c, float((i + r + step) % 5 - 2), dtype=np.float32) for i, c in enumerate(counts)]
                order = list(range(5))[::-1] if r % 2 else list(range(5))
                for i in order:
                    red.mark_ready(i, grads[i])
                red.finalize()
                for i, g in enumerate(grads):
                    expect = np.mean([float((i + q + step) % 5 - 2) for q in range(4)])
                    np.testing.assert_array_equal(g, np.full(counts[i], expect, dtype=np.float32))
            red.destroy()

        on_ranks(4, body)

    def test_never_marked_gradient_is_named(self):
        def body(r, comm):
            red = weft.Reducer(comm, [(4, "float32"), (4, "float32")], names=["fc.weight", "fc.bias"])
            g = np.ones(4, dtype=np.float32)
            red.mark_ready(0, g)
            with self.assertRaisesRegex(weft.WeftError, "'fc.bias'"):
                red.finalize()
            red.mark_ready(1, np.ones(4, dtype=np.float32))
            red.finalize()
            red.destroy()

        on_ranks(2, body)


class LibraryLookup(unittest.TestCase):
    def test_weft_library_variable_wins(self):
        env = dict(os.environ, WEFT_LIBRARY="/nonexistent/libweft.so", PYTHONPATH=PYDIR)
        p = subprocess.run([sys.executable, "-c", "import weft"], env=env, capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("/nonexistent/libweft.so", p.stderr)


class WaitPolicy(unittest.TestCase):
    """wait= reaches weftConfig_t.wait as the weftWaitPolicy_t of its name, and anything else is refused."""

    def configs(self, make):
        """The weftConfig_t values passed to the C ABI while make() runs."""
        seen, real = [], weft._lib.call

        def spy(name, *args):
            for a in args:
                obj = getattr(a, "_obj", None)
                if isinstance(obj, weft._lib.Config):
                    seen.append((name, obj.wait))
            return real(name, *args)

        weft._lib.call = spy
        try:
            made = make()
        finally:
            weft._lib.call = real
        return made, seen

    def test_each_policy_reaches_the_config(self):
        for name, code in (("default", 0), ("spin", 1), ("yield", 2), ("block", 3)):
            comms, seen = self.configs(lambda: weft.init_in_process(2, wait=name))
            self.assertEqual(seen, [("weftCommInitInProcess", code)], name)
            on_ranks_comms(comms)

    def test_bad_policy_is_refused_naming_it(self):
        for bad in ("Spin", "busy", "", None, 1, True):
            with self.assertRaises(ValueError) as cm:
                weft.init_in_process(2, wait=bad)
            msg = str(cm.exception)
            self.assertIn("wait=%r" % (bad,), msg)
            self.assertIn("'block'", msg)
            with self.assertRaises(ValueError) as cm:
                weft.init(wait=bad)
            self.assertIn("weft.init: wait=%r" % (bad,), str(cm.exception))

    def test_the_config_field_is_where_the_library_reads_it(self):
        # An out-of-range value set past Python's check: the library names the field, so the
        # struct's layout puts `wait` where weft/comm.h does.
        cfg = weft._lib.Config(weft.comm.BACKENDS["inprocess"], wait=9)
        handles = (ctypes.c_void_p * 1)()
        with self.assertRaises(weft.WeftError) as cm:
            weft._lib.call("weftCommInitInProcess", handles, 1, ctypes.byref(cfg))
        self.assertIn("config->wait = 9", str(cm.exception))


def on_ranks_comms(comms):
    """A sum over the in-process ranks `comms`, one thread each, then destroys them."""
    results = [None] * len(comms)

    def run(r):
        x = np.full(8, r + 1, dtype=np.float32)
        comms[r].all_reduce(x)
        results[r] = x

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in comms:
        c.destroy()
    want = sum(range(1, len(comms) + 1))
    for x in results:
        np.testing.assert_array_equal(x, np.full(8, want, dtype=np.float32))


if __name__ == "__main__":
    unittest.main()
