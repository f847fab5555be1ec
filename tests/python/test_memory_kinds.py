#!/usr/bin/env python3
"""The CUDA surface of the Python package, as far as it can be exercised
without a GPU: weft.init's new arguments, the refusals of tensors of the
wrong memory kind, stream arguments, and clean weft errors (never a crash)
where the library is asked for CUDA work on a machine without a usable
device. The CUDA paths themselves are tests/gpu/python_cuda_test.py.

Nothing here fakes CUDA: the "cuda" communicator kind is only reached
through the library (which refuses it here) or through the package's own
argument checks. Exits 77 without torch.
"""

import os
import sys
import threading
import unittest

try:
    import numpy as np
    import torch
except ImportError as e:
    print("skip: needs .venv/bin/python (tools/setup) with torch and numpy (%s)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import weft  # noqa: E402
import weft.torch  # noqa: E402
from weft import _tensors  # noqa: E402
from weft.comm import _device_ordinal  # noqa: E402

HAVE_CUDA = torch.cuda.is_available()


class InitArguments(unittest.TestCase):
    def test_bad_arguments_are_value_errors_before_any_call(self):
        for kwargs, word in (({"backend": "gloo"}, "gloo"), ({"device": "cpu"}, "cpu"), ({"device": -1}, "-1"),
                             ({"device": True}, "True"), ({"device": "cuda:x"}, "cuda:x"),
                             ({"backend": "mpi", "device": 0}, "mpi")):
            with self.assertRaises(ValueError, msg=str(kwargs)) as cm:
                weft.init(**kwargs)
            self.assertIn(word, str(cm.exception), str(kwargs))

    def test_device_forms(self):
        self.assertIsNone(_device_ordinal(None))
        self.assertEqual(_device_ordinal(3), 3)
        self.assertEqual(_device_ordinal("cuda:2"), 2)
        self.assertIsNone(_device_ordinal("cuda"), "no index: weft chooses (local rank modulo device count)")
        self.assertEqual(_device_ordinal(torch.device("cuda", 1)), 1)
        with self.assertRaises(ValueError):
            _device_ordinal(torch.device("cpu"))

    @unittest.skipIf(HAVE_CUDA, "a CUDA device is usable here: NCCL would start")
    def test_nccl_world_without_a_device_is_a_weft_error_then_host_init_works(self):
        # The library's own refusal (no driver, no device), as a Python exception; nothing is left half made.
        for kwargs in ({"backend": "nccl"}, {"device": 0}, {"device": "cuda"}):
            with self.assertRaises(weft.WeftError, msg=str(kwargs)) as cm:
                weft.init(**kwargs)
            self.assertNotEqual(cm.exception.code, 0)
            # No usable CUDA device, or (a -Dcuda=disabled build) no NCCL backend built in.
            message = str(cm.exception).lower()
            self.assertTrue("cuda" in message or "nccl" in message, "%s: %s" % (kwargs, message))
        world = weft.init()
        self.assertEqual(world.memory, "host")
        self.assertIsNone(world.device)
        self.assertIs(weft.init(), world)
        with self.assertRaises(ValueError) as cm:
            weft.init(backend="nccl")  # the world exists, on host memory
        self.assertIn("host", str(cm.exception))
        # Nor over another host backend than the one it has (one rank alone: in-process).
        self.assertIs(weft.init(backend=world.backend), world)
        for other in ("mpi", "ucx"):
            with self.assertRaises(ValueError, msg=other) as cm:
                weft.init(backend=other)
            self.assertIn(world.backend, str(cm.exception))
            self.assertIn(other, str(cm.exception))
        x = torch.arange(6, dtype=torch.float32) + 1
        world.all_reduce(x, op="sum")
        self.assertTrue(torch.equal(x, torch.arange(6, dtype=torch.float32) + 1), "one rank: the sum is x")


class WrongMemoryKind(unittest.TestCase):
    def test_host_tensor_for_cuda_memory_names_it_and_both_kinds(self):
        for x, where in ((torch.ones(4), "cpu"), (np.ones(4, dtype=np.float32), "numpy")):
            with self.assertRaises(ValueError) as cm:
                _tensors.describe(x, "grad", memory="cuda")
            msg = str(cm.exception)
            for word in ("grad", "host", "CUDA memory", where):
                self.assertIn(word, msg)

    def test_other_devices_are_refused_by_name(self):
        comm = weft.init_in_process(1)[0]
        self.assertEqual(comm.memory, "host")
        meta = torch.empty(8, device="meta")
        with self.assertRaises(ValueError) as cm:
            comm.all_reduce(meta)
        self.assertIn("tensor is on meta", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            comm.all_reduce(torch.ones(8), out=meta)
        self.assertIn("out is on meta", str(cm.exception))
        comm.destroy()

    def test_either_kind_where_the_call_takes_both(self):
        p, n, t = _tensors.describe(torch.ones(5, dtype=torch.bfloat16), "full[0]", memory=None)
        self.assertEqual((n, t), (5, 2))

    def test_adapters_refuse_a_module_off_host_and_cuda(self):
        for wrap in (weft.torch.DistributedDataParallel, weft.torch.FullyShardedDataParallel):
            comm = weft.init_in_process(1)[0]
            net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).to("meta")
            with self.assertRaises(ValueError, msg=wrap.__name__) as cm:
                wrap(net, comm=comm)
            self.assertIn("0.weight", str(cm.exception))
            self.assertIn("meta", str(cm.exception))
            comm.destroy()


class Streams(unittest.TestCase):
    def test_host_collectives_take_none_or_a_weft_stream(self):
        comm = weft.init_in_process(1)[0]
        for bad in (7, "default", object()):
            with self.assertRaises(ValueError) as cm:
                comm.all_reduce(torch.ones(3), stream=bad)
            self.assertIn("weft.Stream", str(cm.exception))
        comm.destroy()

    def test_host_collective_on_a_weft_stream_is_enqueued_and_exact(self):
        comms, world = weft.init_in_process(2, timeout_ms=30000), 2
        g = torch.Generator().manual_seed(5)
        inputs = [torch.randint(-50, 50, (1000,), generator=g).to(torch.float32) for _ in range(world)]
        want = inputs[0] + inputs[1]  # small integers: the float sum is exact in any order
        outs, errors = [None] * world, []

        def rank(r):
            try:
                s = weft.Stream()
                src, out = inputs[r].clone(), torch.full((1000,), float("nan"))
                comms[r].all_reduce(src, out=out, stream=s)  # both must live until the stream has run
                s.synchronize()
                outs[r] = out
                s.destroy()
            except BaseException as e:  # noqa: B902 - re-raised below
                errors.append(e)
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
            self.assertFalse(t.is_alive(), "a rank hung")
        if errors:
            raise errors[0]
        for r in range(world):
            self.assertTrue(torch.equal(outs[r], want), "rank %d" % r)
        for c in comms:
            c.destroy()

    def test_cuda_stream_arguments_are_checked(self):
        for bad in (True, "s", 1.5, object()):
            with self.assertRaises(ValueError):
                _tensors.stream_handle(bad, "cuda")
        self.assertIsNone(_tensors.stream_handle(0, "cuda"), "0 is the legacy default stream: NULL")
        self.assertEqual(_tensors.stream_handle(0x1234, "cuda"), 0x1234)


class ReducerArguments(unittest.TestCase):
    def test_refusals_name_the_gradient_and_change_nothing(self):
        comm = weft.init_in_process(1)[0]
        red = weft.Reducer(comm, [(4, torch.float32), (3, torch.float32)], names=["w", "b"])
        w, b = torch.randn(4), torch.randn(3)
        with self.assertRaises(ValueError) as cm:
            red.mark_ready(0, torch.empty(4, device="meta"))
        self.assertIn("gradient 0 (w)", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            red.mark_ready(0, w, stream=5)  # host memory: None or a weft.Stream
        self.assertIn("weft.Stream", str(cm.exception))
        with self.assertRaises(ValueError):
            red.finalize(stream=5)
        want_w, want_b = w.clone(), b.clone()
        red.mark_ready(0, w)
        red.mark_ready(1, b)
        red.finalize()  # one rank: the average is the gradient itself
        self.assertTrue(torch.equal(w, want_w) and torch.equal(b, want_b))
        red.destroy()
        comm.destroy()


class ShardScheduleOnCuda(unittest.TestCase):
    def test_memory_argument(self):
        with self.assertRaises(ValueError) as cm:
            weft.ShardSchedule(memory="gpu")
        self.assertIn("gpu", str(cm.exception))

    def test_a_weft_stream_for_cuda_memory_is_refused(self):
        s = weft.Stream()
        with self.assertRaises(ValueError) as cm:  # by the package
            weft.ShardSchedule(stream=s, memory="cuda")
        self.assertIn("torch.cuda.Stream", str(cm.exception))
        with self.assertRaises(weft.WeftError) as cm:  # by the library, given its address as a cudaStream_t
            weft.ShardSchedule(stream=s.handle.value, memory="cuda")
        self.assertIn("host stream", str(cm.exception))
        s.destroy()

    @unittest.skipIf(HAVE_CUDA, "a CUDA device is usable here")
    def test_cuda_schedule_without_a_device_is_a_weft_error(self):
        with self.assertRaises(weft.WeftError) as cm:
            weft.ShardSchedule(stream=0, memory="cuda")
        self.assertIn("cuda", str(cm.exception).lower())


if __name__ == "__main__":
    unittest.main(verbosity=2)
