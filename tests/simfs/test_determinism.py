"""The same seed gives the same run whatever the process ran before (issue 10, item 6).

pytest and Hypothesis run many worlds, one after another, in one long-lived
process that also starts real threads.  Every identifier a program can
observe (thread names, idents, native ids, pids, descriptors, inode numbers,
temp names) must come from the world, so that a failing seed found on the
1,000th world replays as the first world of a fresh process.

The workload writes what it observes into the names of the directories it
creates, so any identifier that leaks from the interpreter changes the
trace digest, not only the return value.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import trio

from simfs import World

ROOT = Path(__file__).resolve().parents[2]


def _observe(root: str, what: str) -> str:
    """Record, in a directory name, every identifier this thread can observe."""
    thread = threading.current_thread()
    fd = os.open(f"{root}/probe-{what}", os.O_CREAT | os.O_WRONLY, 0o644)
    inode = os.fstat(fd).st_ino
    os.close(fd)
    seen = [what, thread.name, threading.get_ident(), thread.ident,
            threading.get_native_id(), thread.native_id, os.getpid(), fd, inode,
            threading.active_count()]
    tag = "_".join(str(part) for part in seen).replace(" ", "").replace("/", "")
    os.mkdir(f"{root}/{tag}")
    return tag


def _workload(root: str) -> list[str]:
    """Threads, a pool, locks, temp files, uuids, trio, asyncio: all that names things."""
    os.makedirs(root, exist_ok=True)
    seen = [_observe(root, "main")]
    lock = threading.Lock()
    ready = threading.Event()

    def work(index: int) -> None:
        with lock:
            time.sleep(0.01 * (index % 3))
            seen.append(_observe(root, f"w{index}"))
        if index == 1:
            ready.set()

    threads = [threading.Thread(target=work, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    ready.wait(5)
    for thread in threads:
        thread.join()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(work, index) for index in range(2, 5)]
        for future in concurrent.futures.as_completed(futures):
            future.result()
    with tempfile.NamedTemporaryFile(dir=root) as handle:
        seen.append(Path(handle.name).name)
    descriptor, name = tempfile.mkstemp(dir=root)
    os.close(descriptor)
    seen.append(f"{Path(name).name}:{uuid.uuid4()}:{random.random()}")

    async def async_main() -> str:
        async with trio.open_nursery() as nursery:
            for delay in (0.3, 0.1, 0.2):
                nursery.start_soon(trio.sleep, delay)
        return await trio.to_thread.run_sync(_observe, root, "trio")

    seen.append(trio.run(async_main))

    async def asyncio_main() -> str:
        await asyncio.gather(*(asyncio.sleep(delay) for delay in (0.2, 0.1)))
        return await asyncio.to_thread(_observe, root, "asyncio")

    seen.append(asyncio.run(asyncio_main()))
    seen.append(f"{time.time()}")
    return seen


def _other_workload(root: str) -> None:
    """Something else a test process might have run in between."""
    os.makedirs(root, exist_ok=True)
    with concurrent.futures.ThreadPoolExecutor() as pool:
        list(pool.map(lambda i: Path(f"{root}/{i}").write_text("x"), range(3)))


def world_digest(seed: int) -> tuple[str, list[object]]:
    """(trace digest, results) of the workload on two hosts under ``seed``."""
    world = World(seed=seed)
    world.server.mkdir("/shared/d")
    processes = [world.spawn(world.host(host), _workload, f"/shared/d/{host}")
                 for host in ("a", "b")]
    world.run()
    return world.trace.digest(), [process.result() for process in processes]


def _disturb(round_: int) -> None:
    """Advance every interpreter-wide counter and reshuffle the allocator."""
    if round_ % 4 == 0:
        other = World(seed=10_000 + round_)
        other.spawn(other.host("x"), _other_workload, "/shared/o")
        other.run()
    real = threading.Thread(target=threading.current_thread)
    real.start()
    real.join()
    with concurrent.futures.ThreadPoolExecutor() as pool:
        pool.submit(threading.get_ident).result()
    _ = [object() for _ in range(round_ % 7 * 100)]
    if round_ % 50 == 0:
        gc.collect()


_CHILD = """\
import sys
from tests.simfs.test_determinism import world_digest
for seed in sys.argv[1:]:
    print(seed, world_digest(int(seed))[0], flush=True)
"""


def _start_child(seeds: list[int], hash_seed: int) -> subprocess.Popen[str]:
    """A new interpreter that prints each seed's digest, in the order given."""
    # A different hash seed in each child: no str-keyed dict or set order may matter.
    env = dict(os.environ, PYTHONHASHSEED=str(hash_seed))
    return subprocess.Popen([sys.executable, "-c", _CHILD, *map(str, seeds)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, text=True)


def _collect(child: subprocess.Popen[str]) -> dict[int, str]:
    out, _ = child.communicate(timeout=1800)
    assert child.returncode == 0, out
    return {int(seed): digest for seed, digest in (line.split() for line in out.splitlines())}


def _fresh_digests(seeds: list[int]) -> dict[int, str]:
    """Each seed's digest as the first world of its own new interpreter."""
    found: dict[int, str] = {}
    parallel = max(1, min(4, os.cpu_count() or 1))
    for start in range(0, len(seeds), parallel):
        children = [_start_child([seed], hash_seed=seed + 1)
                    for seed in seeds[start:start + parallel]]
        for child in children:
            found.update(_collect(child))
    return found


def _long_lived_digests(seeds: list[int]) -> dict[int, str]:
    """Each seed in this process, with other worlds and real threads in between."""
    found = {}
    for round_, seed in enumerate(seeds):
        _disturb(round_)
        found[seed] = world_digest(seed)[0]
    return found


def _identical(found: dict[int, str], reference: dict[int, str]) -> str:
    same = sum(found[seed] == digest for seed, digest in reference.items())
    differ = sorted(seed for seed, digest in reference.items() if found[seed] != digest)
    return f"{same} of {len(reference)} identical; seeds that differ: {differ[:20]}"


def test_200_seeds_give_the_same_digest_late_in_a_long_lived_process_as_in_a_fresh_one():
    seeds = list(range(200))
    # Another long-lived interpreter runs the seeds in the opposite order (a
    # different history) while this one runs them between other worlds.
    other = _start_child(seeds[::-1], hash_seed=4242)
    here = _long_lived_digests(seeds)
    elsewhere = _collect(other)
    assert here == elsewhere, _identical(here, elsewhere)
    fresh = _fresh_digests(random.Random(200).sample(seeds, 10))
    assert all(here[seed] == digest for seed, digest in fresh.items()), _identical(here, fresh)
    assert len(set(here.values())) > 150  # the seeds do choose different runs


@pytest.mark.quality
def test_1000_seeds_give_the_same_digest_in_one_process_as_each_in_a_fresh_process():
    seeds = list(range(1000))
    here = _long_lived_digests(seeds)
    fresh = _fresh_digests(seeds)
    assert here == fresh, _identical(here, fresh)


def test_thread_identities_start_afresh_in_every_simulated_process():
    _disturb(1)  # real threads advance threading's own counters first

    def observe() -> list[object]:
        main = threading.current_thread()
        names = []
        thread = threading.Thread(target=lambda: names.append(
            (threading.current_thread().name, threading.get_native_id(),
             threading.get_ident())))
        thread.start()
        thread.join()
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pool_name = pool.submit(lambda: threading.current_thread().name).result()
        return [main.name, main.native_id == os.getpid(), main.ident == threading.get_ident(),
                names[0][0], names[0][1] != os.getpid(), pool_name]

    world = World(seed=1)
    first = world.spawn(world.host("a"), observe)
    second = world.spawn(world.host("b"), observe)
    world.run()
    expected = ["MainThread", True, True, "Thread-1 (<lambda>)", True,
                "ThreadPoolExecutor-0_0"]
    assert first.result() == expected and second.result() == expected


def test_a_simulated_process_enumerates_only_its_own_threads():
    real = threading.Thread(target=time.sleep, args=(0.01,))
    real.start()
    seen = []

    def observe() -> None:
        worker = threading.Thread(target=lambda: seen.append(
            sorted(thread.name for thread in threading.enumerate())))
        worker.start()
        worker.join()

    world = World(seed=1)
    world.spawn(world.host("a"), observe)
    world.run()
    real.join()
    assert seen == [["MainThread", "Thread-1 (<lambda>)"]]


def test_outside_the_world_threads_keep_their_real_identity():
    World(seed=1).run()  # routes installed
    assert threading.current_thread() is threading.main_thread()
    assert threading.get_native_id() == os.getpid()
    assert threading.get_ident() == threading.main_thread().ident
