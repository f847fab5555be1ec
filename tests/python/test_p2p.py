#!/usr/bin/env python3
"""weft.Comm's send and recv from Python threads over in-process ranks: tags (messages of different tags taken
in another order than they were sent, in order within a tag), on a weft.Stream, and the tag range refused
naming the tag. Payloads name their sender, tag and position, so a message taken from the wrong place shows.
Exits 77 without numpy."""

import os
import sys
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


if __name__ == "__main__":
    unittest.main()
