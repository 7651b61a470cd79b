"""sprof's CPython fixture for the shapes a Python stack takes beyond plain
calls. The first argument picks one; each spins until killed, its samples
ending in the functions named:

threads    two threads run worker -> spin            (worker, spin)
gil        two threads hash in C, the GIL released   (hasher, hash_loop)
generator  a generator spins inside its body          (consume, gen)
async      coroutines awaiting coroutines             (amain, amiddle, aleaf)
"""

import asyncio
import hashlib
import sys
import threading


def spin():
    x = 0
    while True:
        x += 1


def worker():
    spin()


def hash_loop(data):
    while True:
        hashlib.sha256(data).digest()  # in C, without the GIL


def hasher():
    hash_loop(b"x" * (1 << 20))


def gen():
    x = 0
    while True:
        x += 1
        if x % 100000 == 0:
            yield x


def consume():
    for _ in gen():
        pass


async def aleaf():
    spin_here = 0
    while True:
        spin_here += 1


async def amiddle():
    await aleaf()


async def amain():
    await amiddle()


def run_threads(target):
    threads = [threading.Thread(target=target) for _ in range(2)]
    for t in threads:
        t.start()
    print("ready", flush=True)
    for t in threads:
        t.join()


mode = sys.argv[1]
if mode == "threads":
    run_threads(worker)
elif mode == "gil":
    run_threads(hasher)
else:
    print("ready", flush=True)
    if mode == "generator":
        consume()
    elif mode == "async":
        asyncio.run(amain())
