#!/usr/bin/python3
"""The Python binding against a careless caller: tensors dropped while a
weft.Stream still works on them, a DDP step retried after a refused
finalize, numpy arrays of the other byte order, and Python integers too
large for the C argument they are passed as. Each must be kept alive,
refused or raised, never read from freed memory or silently truncated.
Exits 77 without numpy."""

import gc
import os
import sys
import threading
import unittest
import weakref

try:
    import numpy as np
except ImportError as e:
    print("skip: needs /usr/bin/python3 with numpy (%s)" % e)
    sys.exit(77)
try:
    import torch
except ImportError:
    torch = None

PYDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.insert(0, PYDIR)
import weft  # noqa: E402


class StreamKeepsTensors(unittest.TestCase):
    def test_dropped_tensor_lives_until_synchronize(self):
        comms = weft.init_in_process(2, timeout_ms=20000)
        stream = weft.Stream()
        a = np.arange(1, 1025, dtype=np.float32)
        out = np.zeros_like(a)
        # Rank 1 has not called yet: rank 0's work waits on the stream's thread.
        comms[0].all_reduce(a, out=out, stream=stream)
        refs = [weakref.ref(a), weakref.ref(out)]
        del a, out
        gc.collect()
        self.assertTrue(all(r() is not None for r in refs), "the stream's tensors were freed while queued")
        b = np.arange(1, 1025, dtype=np.float32)
        peer = threading.Thread(target=comms[1].all_reduce, args=(b,))
        peer.start()
        peer.join()
        result = refs[1]()
        stream.synchronize()
        np.testing.assert_array_equal(result, 2 * np.arange(1, 1025, dtype=np.float32))
        del result
        gc.collect()
        self.assertTrue(all(r() is None for r in refs), "the stream kept its tensors after synchronize")
        stream.destroy()
        for c in comms:
            c.destroy()


class ByteOrder(unittest.TestCase):
    def test_other_byte_order_is_refused(self):
        comm = weft.init_in_process(1)[0]
        swapped = np.arange(8, dtype=np.float32).astype(np.dtype(np.float32).newbyteorder("S"))
        with self.assertRaisesRegex(ValueError, "byte order"):
            comm.all_reduce(swapped)
        native = np.arange(8, dtype=np.float32)
        comm.all_reduce(native)  # still accepted
        comm.destroy()


class IntegerRange(unittest.TestCase):
    def test_root_beyond_c_int_is_refused(self):
        comm = weft.init_in_process(1)[0]
        x = np.ones(4, dtype=np.float32)
        with self.assertRaisesRegex(ValueError, "4294967297"):
            comm.broadcast(x, root=2 ** 32 + 1)  # would be root 1 once truncated
        with self.assertRaisesRegex(ValueError, "does not fit"):
            comm.split(color=2 ** 31)
        comm.destroy()

    def test_timeout_beyond_c_int_is_refused(self):
        with self.assertRaisesRegex(ValueError, "timeout_ms"):
            weft.init_in_process(1, timeout_ms=2 ** 40)
        with self.assertRaisesRegex(ValueError, "does not fit"):
            weft.init_in_process(2 ** 32 + 1)

    def test_reducer_index_beyond_c_int_is_refused(self):
        comm = weft.init_in_process(1)[0]
        g = np.ones(4, dtype=np.float32)
        red = weft.Reducer(comm, [(4, "float32")])
        with self.assertRaisesRegex(ValueError, "does not fit"):
            red.mark_unused(2 ** 32)  # would be gradient 0 once truncated
        red.mark_ready(0, g)  # gradient 0 is still unmarked
        red.finalize()
        red.destroy()
        comm.destroy()


@unittest.skipIf(torch is None, "needs torch")
class DdpRetryAfterRefusedFinalize(unittest.TestCase):
    def test_marked_gradients_stay_alive_while_the_reducer_holds_them(self):
        import weft.torch
        comm = weft.init_in_process(1)[0]
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
        ddp = weft.torch.DistributedDataParallel(model, comm=comm)
        x = torch.ones(2, 4)
        # Only the first layer is used: finalize refuses (no find_unused) ...
        with self.assertRaises(weft.WeftError):
            model[0](x).sum().backward()
        marked = [weakref.ref(p.grad) for p in model[0].parameters()]
        # ... and the reducer still holds the first layer's gradients: the
        # caller dropping them must not free what the reducer will read.
        for p in model.parameters():
            p.grad = None
        gc.collect()
        self.assertTrue(all(r() is not None for r in marked), "marked gradients were freed under the reducer")
        # The rest of the step: the second layer's gradients complete it.
        model[1](x).sum().backward()
        self.assertTrue(all(p.grad is not None for p in model[1].parameters()))
        del ddp
        comm.destroy()


if __name__ == "__main__":
    unittest.main()
