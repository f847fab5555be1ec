#!/usr/bin/python3
"""weft.kernels against numpy references: flatten, unflatten (with and
without accumulation), unscale with the found-inf flag, L2 norms, chunk
cat and split, over numpy arrays and CPU torch tensors, on a NULL stream
and a weft.Stream; and the sizes checked before any C call. Exits 77
without numpy."""

import os
import sys
import unittest

try:
    import numpy as np
except ImportError as e:
    print("skip: needs numpy (%s)" % e)
    sys.exit(77)
try:
    import torch
except ImportError:
    torch = None

PYDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
sys.path.insert(0, PYDIR)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from threads import stream_threads  # noqa: E402
import weft  # noqa: E402
import weft.kernels as K  # noqa: E402

RNG = np.random.default_rng(7)


def rand(n, dtype=np.float32):
    return (RNG.standard_normal(n) * 3).astype(dtype)


def scaled(x, scale, out_dtype):
    """The reference conversion: scale * x in float32 (float64 when either side is), rounded once."""
    wide = np.float64 if (x.dtype == np.float64 or np.dtype(out_dtype) == np.float64) else np.float32
    return (x.astype(wide) * wide(np.float32(scale))).astype(out_dtype)


class Flatten(unittest.TestCase):
    def test_packs_back_to_back_with_scale_and_cast(self):
        srcs = [rand(5), rand(1), rand(37)]
        for dtype in (np.float32, np.float16, np.float64):
            dst = np.full(43, 99, dtype=dtype)
            K.flatten(srcs, dst, scale=0.25)
            np.testing.assert_array_equal(dst, scaled(np.concatenate(srcs), 0.25, dtype))

    def test_offsets_leave_gaps_untouched(self):
        srcs = [rand(4), rand(3)]
        dst = np.full(20, -1, dtype=np.float32)
        K.flatten(srcs, dst, offsets=[10, 2])
        want = np.full(20, -1, dtype=np.float32)
        want[10:14], want[2:5] = srcs
        np.testing.assert_array_equal(dst, want)

    def test_float16_sources_widen(self):
        srcs = [rand(9, np.float16), rand(2, np.float16)]
        dst = np.zeros(11, dtype=np.float32)
        K.flatten(srcs, dst, scale=3.0)
        np.testing.assert_array_equal(dst, scaled(np.concatenate(srcs), 3.0, np.float32))

    def test_destination_too_small_is_refused_before_the_call(self):
        dst = np.zeros(4, dtype=np.float32)
        with self.assertRaisesRegex(ValueError, "dst has 4 elements, but the call needs 5"):
            K.flatten([rand(5)], dst)
        with self.assertRaisesRegex(ValueError, "dst has 4 elements, but the call needs 9"):
            K.flatten([rand(1)], dst, offsets=[8])
        np.testing.assert_array_equal(dst, 0)

    def test_unsupported_dtype_is_a_weft_error(self):
        with self.assertRaises(weft.WeftError) as e:
            K.flatten([np.arange(4, dtype=np.int32)], np.zeros(4, dtype=np.float32))
        self.assertIn("srcs[0].dtype", str(e.exception))

    def test_on_a_weft_stream(self):
        s = weft.Stream()
        srcs = [rand(1000), rand(24)]
        dst = np.zeros(1024, dtype=np.float32)
        K.flatten(srcs, dst, scale=2.0, stream=s)
        s.synchronize()
        np.testing.assert_array_equal(dst, scaled(np.concatenate(srcs), 2.0, np.float32))
        s.destroy()

    def test_on_a_stream_that_follows_its_issuer(self):
        """Stream(issuer_cpu=True): the stream's thread runs each call on the CPU the calling thread was on."""
        start = os.sched_getaffinity(0)
        before = set(stream_threads())
        s = weft.Stream(issuer_cpu=True)  # its thread starts on every CPU of this one
        try:
            for c in sorted(start)[:4]:
                os.sched_setaffinity(0, {c})
                srcs = [rand(100)]
                dst = np.zeros(100, dtype=np.float32)
                K.flatten(srcs, dst, stream=s)
                s.synchronize()
                np.testing.assert_array_equal(dst, srcs[0])
                mine = [a for t, a in stream_threads().items() if t not in before]
                self.assertEqual(mine, [{c}], "called on CPU %d" % c)
        finally:
            os.sched_setaffinity(0, start)
            s.destroy()


class Unflatten(unittest.TestCase):
    def test_copies_out_with_cast(self):
        src = rand(12)
        dsts = [np.zeros(7, dtype=np.float16), np.zeros(5, dtype=np.float64)]
        K.unflatten(src, dsts, scale=0.5)
        np.testing.assert_array_equal(dsts[0], scaled(src[:7], 0.5, np.float16))
        np.testing.assert_array_equal(dsts[1], scaled(src[7:], 0.5, np.float64))

    def test_accumulate_adds_before_the_one_rounding(self):
        src = rand(6)
        old32, old16 = rand(4), rand(2, np.float16)
        dsts = [old32.copy(), old16.copy()]
        K.unflatten(src, dsts, offsets=[2, 0], scale=1.5, accumulate=True)
        np.testing.assert_array_equal(dsts[0], old32 + np.float32(1.5) * src[2:6])
        want16 = (old16.astype(np.float32) + np.float32(1.5) * src[0:2]).astype(np.float16)
        np.testing.assert_array_equal(dsts[1], want16)

    def test_source_too_small_is_refused(self):
        with self.assertRaisesRegex(ValueError, "src has 3 elements, but the call needs 4"):
            K.unflatten(rand(3), [np.zeros(4, dtype=np.float32)])


class UnscaleAndNorm(unittest.TestCase):
    def test_unscale_in_place_and_found_inf(self):
        a, b = rand(100), rand(33, np.float16)
        want_a = a * np.float32(0.125)
        want_b = (b.astype(np.float32) * np.float32(0.125)).astype(np.float16)
        self.assertFalse(K.unscale_check_finite([a, b], 0.125))
        np.testing.assert_array_equal(a, want_a)
        np.testing.assert_array_equal(b, want_b)
        c = rand(8)
        c[5] = np.inf
        self.assertTrue(K.unscale_check_finite([a, c], 1.0))
        d = np.array([1e4], dtype=np.float16)  # 1e4 * 10 overflows float16
        self.assertTrue(K.unscale_check_finite([d], 10.0))
        self.assertTrue(np.isinf(d[0]))

    def test_l2_norm_matches_float64_reference(self):
        xs = [rand(1000), rand(3), rand(257, np.float16)]
        total, norms = K.l2_norm(xs)
        ref = [np.sqrt(np.sum(x.astype(np.float64) ** 2)) for x in xs]
        np.testing.assert_allclose(norms, ref, rtol=1e-6)
        np.testing.assert_allclose(total, np.sqrt(sum(r * r for r in ref)), rtol=1e-6)
        self.assertEqual(K.l2_norm(xs), (total, norms))  # the same bits every run


class ChunkCatSplit(unittest.TestCase):
    def reference_cat(self, srcs, world, chunks, dtype, scale):
        slabs = []
        for r in range(world):
            for x, c in zip(srcs, chunks):
                part = np.zeros(c, dtype=np.float32)
                piece = x[r * c:(r + 1) * c]
                part[:len(piece)] = piece
                slabs.append(part)
        return scaled(np.concatenate(slabs), scale, dtype)

    def test_cat_pads_each_rank_chunk(self):
        srcs, world = [rand(10), rand(3), rand(8)], 4
        chunks = [3, 1, 2]  # ceil(count / world)
        dst = np.full(4 * 6, 7, dtype=np.float16)
        K.chunk_cat(srcs, world, dst, scale=2.0)
        np.testing.assert_array_equal(dst, self.reference_cat(srcs, world, chunks, np.float16, 2.0))

    def test_explicit_chunk_counts_and_split_inverts(self):
        srcs, world, chunks = [rand(9), rand(4)], 3, [4, 2]
        flat = np.zeros(3 * 6, dtype=np.float32)
        K.chunk_cat(srcs, world, flat, chunk_counts=chunks)
        np.testing.assert_array_equal(flat, self.reference_cat(srcs, world, chunks, np.float32, 1.0))
        back = [np.zeros(9, dtype=np.float32), np.zeros(4, dtype=np.float64)]
        K.chunk_split(flat, world, back, chunk_counts=chunks, scale=0.5)
        np.testing.assert_array_equal(back[0], scaled(srcs[0], 0.5, np.float32))
        np.testing.assert_array_equal(back[1], scaled(srcs[1], 0.5, np.float64))
        K.chunk_split(flat, world, back, chunk_counts=chunks, accumulate=True)
        np.testing.assert_array_equal(back[0], scaled(srcs[0], 0.5, np.float32) + srcs[0])

    def test_too_small_and_bad_world(self):
        with self.assertRaisesRegex(ValueError, "dst has 5 elements, but the call needs 6"):
            K.chunk_cat([rand(5)], 2, np.zeros(5, dtype=np.float32))
        with self.assertRaisesRegex(ValueError, "world = 0"):
            K.chunk_split(rand(4), 0, [np.zeros(4, dtype=np.float32)])
        with self.assertRaisesRegex(ValueError, "chunk_counts has 1 entries for 2 tensors"):
            K.chunk_cat([rand(2), rand(2)], 2, np.zeros(8, dtype=np.float32), chunk_counts=[2])


@unittest.skipIf(torch is None, "needs torch")
class TorchTensors(unittest.TestCase):
    def test_bfloat16_flatten_matches_torch_rounding(self):
        srcs = [torch.randn(33, generator=torch.Generator().manual_seed(1)) * 5, torch.randn(7)]
        dst = torch.zeros(40, dtype=torch.bfloat16)
        K.flatten(srcs, dst, scale=0.1)
        want = (torch.cat(srcs) * torch.tensor(0.1, dtype=torch.float32)).to(torch.bfloat16)
        self.assertTrue(torch.equal(dst, want))
        back = [torch.zeros(33), torch.zeros(7)]
        K.unflatten(dst, back)
        self.assertTrue(torch.equal(torch.cat(back), want.float()))

    def test_norm_and_unscale_on_torch(self):
        g = torch.randn(500, dtype=torch.float32)
        total, norms = K.l2_norm([g])
        self.assertAlmostEqual(total, float(torch.linalg.vector_norm(g.double())), delta=1e-5 * total)
        want = g * 0.5
        self.assertFalse(K.unscale_check_finite([g], 0.5))
        self.assertTrue(torch.equal(g, want))

    def test_non_host_tensor_is_refused(self):
        t = torch.empty(4, device="meta")
        with self.assertRaisesRegex(ValueError, "weft drives host"):
            K.flatten([t], torch.zeros(4))


if __name__ == "__main__":
    unittest.main()
