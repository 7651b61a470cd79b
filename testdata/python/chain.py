"""sprof's CPython fixture: a known call chain for the profiler to find.

<module> calls outer, outer calls middle, middle calls leaf, which spins.
Every eighth round middle calls encode instead, which runs json.dumps
through the json module's C accelerator; the accelerator calls back into
Python (default=) for the objects it cannot encode, and that callback calls
leaf. The tests find the lines below by their "# sprof:" marks, so the
file can change without the tests.

It runs until killed, or for as many rounds as its first argument says.
"""

import json
import sys


class Opaque:
    """An object json cannot encode without help."""


DATA = [Opaque() for _ in range(8)]


def leaf(n):
    total = 0
    for i in range(n):  # sprof: leaf
        total += i * i  # sprof: leaf
    return total


def callback(obj):
    return leaf(2000)  # sprof: callback calls leaf


def encode():
    return json.dumps(DATA, default=callback)  # sprof: encode calls dumps


def middle(r):
    if r % 8 == 0:
        return encode()  # sprof: middle calls encode
    return leaf(20000)  # sprof: middle calls leaf


def outer(rounds):
    r = 0
    while rounds < 0 or r < rounds:
        middle(r)  # sprof: outer calls middle
        r += 1


print("ready", flush=True)
outer(int(sys.argv[1]) if len(sys.argv) > 1 else -1)  # sprof: module calls outer
