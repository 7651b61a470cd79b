"""sprof's deep CPython fixture: a Python stack of a given depth.

<module> calls down, which recurses until the stack holds as many Python
frames as the first argument says, and spins there until killed: the
benchmark of the sampler's Python walk samples it.
"""

import sys


def down(n):
    if n > 0:
        return down(n - 1)
    while True:
        pass


print("ready", flush=True)
down(int(sys.argv[1]) - 2)  # <module> and down(depth-2) .. down(0)
