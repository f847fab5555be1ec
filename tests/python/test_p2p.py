#!/usr/bin/env python3
"""weft.Comm's send and recv from Python threads over in-process ranks: tags (messages of different tags taken
in another order than they were sent, in order within a tag), on a weft.Stream, and the tag range refused
naming the tag; receives from any rank, blocking and on a weft.Stream, reporting each sender. Payloads name their
sender, tag and position, so a message taken from the wrong place shows. Exits 77 without numpy."""

import os
import sys
import threading
import unittest

try:
    import numpy as np
except ImportError as e:
    print("skip: needs .venv/bin/python (tools/setup) with numpy (%s)" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_comm_threads import on_ranks  # noqa: E402  also puts the checkout's python/ on sys.path
import weft  # noqa: E402


def payload(sender, tag, k, n=6, dtype=np.int32):
    """Message k of `tag` from `sender`: every element says where it came from."""
    return (np.arange(n) + 1000 * sender + 100 * tag + 10 * k).astype(dtype)


class Tags(unittest.TestCase):
    def test_messages_of_other_tags_are_taken_out_of_order(self):
        n = 3

        def body(r, comm):
            nxt, prev = (r + 1) % n, (r - 1) % n
            # Two messages on tag 1, one on tag 2 (of another dtype and size), one on tag 0.
            comm.send(payload(r, 1, 0), nxt, tag=1)
            comm.send(payload(r, 1, 1), nxt, tag=1)
            comm.send(payload(r, 2, 0, 70000, np.float32), nxt, tag=2)
            comm.send(payload(r, 0, 0), nxt)
            for tag, k, size, dtype in ((2, 0, 70000, np.float32), (0, 0, 6, np.int32), (1, 0, 6, np.int32),
                                        (1, 1, 6, np.int32)):
                got = np.full(size, -1, dtype=dtype)
                self.assertEqual(comm.recv(got, prev, tag=tag), prev)
                np.testing.assert_array_equal(got, payload(prev, tag, k, size, dtype))

        on_ranks(n, body)

    def test_on_a_stream(self):
        def body(r, comm):
            other = 1 - r
            s = weft.Stream()
            comm.send(payload(r, 7, 0), other, tag=7, stream=s)
            comm.send(payload(r, 8, 0), other, tag=8, stream=s)
            a, b = np.full(6, -1, dtype=np.int32), np.full(6, -1, dtype=np.int32)
            comm.recv(b, other, tag=8, stream=s)
            comm.recv(a, other, tag=7, stream=s)
            s.synchronize()
            np.testing.assert_array_equal(a, payload(other, 7, 0))
            np.testing.assert_array_equal(b, payload(other, 8, 0))
            s.destroy()

        on_ranks(2, body)

    def test_tag_range(self):
        self.assertEqual(weft.comm.TAG_MAX, 32767)

        def body(r, comm):
            x = np.ones(4, dtype=np.float32)
            for tag in (-1, weft.comm.TAG_MAX + 1):
                with self.assertRaisesRegex(weft.WeftError, "tag = %d is outside" % tag):
                    comm.send(x, r, tag=tag)
                with self.assertRaisesRegex(weft.WeftError, "tag = %d is outside" % tag):
                    comm.recv(x, r, tag=tag)
            comm.send(payload(r, 3, 0, 4, np.float32), r, tag=weft.comm.TAG_MAX)
            comm.recv(x, r, tag=weft.comm.TAG_MAX)
            np.testing.assert_array_equal(x, payload(r, 3, 0, 4, np.float32))

        on_ranks(1, body)


class AnySource(unittest.TestCase):
    def test_every_sender_once_with_its_data(self):
        n = 4

        def body(r, comm):
            comm.send(payload(r, 5, 0), 0, tag=5)
            comm.send(payload(r, 6, 0), 0, tag=6)
            if r != 0:
                return
            seen = []
            for _ in range(n):  # tag 6 first: tag 5's messages wait
                got = np.full(6, -1, dtype=np.int32)
                src = comm.recv(got, tag=6)
                np.testing.assert_array_equal(got, payload(src, 6, 0))
                seen.append(src)
            self.assertEqual(sorted(seen), list(range(n)))
            s = weft.Stream()
            boxes = [np.full(6, -1, dtype=np.int32) for _ in range(n)]
            pending = [comm.recv(b, tag=5, stream=s) for b in boxes]
            s.synchronize()
            self.assertEqual(sorted(p.rank for p in pending), list(range(n)))
            for p, b in zip(pending, boxes):
                np.testing.assert_array_equal(b, payload(p.rank, 5, 0))
            self.assertEqual(comm.recv(np.zeros(0, dtype=np.int32), tag=5), -1)  # count 0 matches nothing
            s.destroy()

        on_ranks(n, body)

    def test_pending_until_the_stream_ran_it(self):
        looked = threading.Event()  # the ranks are threads of this process

        def body(r, comm):
            if r == 1:
                self.assertTrue(looked.wait(30))  # rank 0 has looked at its pending source
                comm.send(payload(1, 8, 0), 0, tag=8)
                return
            s = weft.Stream()
            got = np.full(6, -1, dtype=np.int32)
            pending = comm.recv(got, tag=8, stream=s)
            with self.assertRaisesRegex(ValueError, "synchronise its stream first"):
                pending.rank
            looked.set()
            s.synchronize()
            self.assertEqual(pending.rank, 1)
            np.testing.assert_array_equal(got, payload(1, 8, 0))
            s.destroy()

        on_ranks(2, body)


if __name__ == "__main__":
    unittest.main()
