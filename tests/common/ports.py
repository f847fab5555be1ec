"""Ports for the test launchers' stores and weft's bootstrap, taken from below the kernel's ephemeral range.

A port that bind(("", 0)) hands out lies in the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range,
32768-60999 by default), where the kernel goes on handing ports to other processes' connections and
listeners: with tests running side by side, one of them took such a port in the moment between the launcher
freeing it and a rank binding it ("Address already in use"). Below the range only explicit binds take a port,
and the pick is random, so launchers running at once do not pick alike.
"""

import random
import socket


def _ephemeral_start():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port(also_below=0):
    """A port P that is free now, with P - 1 .. P - also_below free as well (a launcher that derives its other
    ports from P), below the ephemeral range."""
    top = _ephemeral_start()
    bottom = max(1024 + also_below + 1, top - 12000)
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.randrange(bottom, top)
        if all(_free(port - k) for k in range(also_below + 1)):
            return port
    raise RuntimeError("no free port in %d-%d" % (bottom, top - 1))
