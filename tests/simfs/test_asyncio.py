"""asyncio runs on the world's virtual clock, as trio does (issue 10, item 7).

Before: the loop waited in the real ``epoll`` for a ``run_in_executor``
future whose worker, a simulated thread, could never run, until
``BlockedOutsideSimulation`` 20 s of real time later.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from simfs import ProcessNotFinished, RunawaySimulation, World


def _make(path: str) -> str:
    time.sleep(2)  # virtual: the worker is a simulated thread
    os.mkdir(path)
    return path


async def _every_wait(tag: str) -> list[float]:
    loop = asyncio.get_running_loop()
    seen = [loop.time()]
    await asyncio.sleep(5)
    seen.append(loop.time())
    await loop.run_in_executor(None, _make, f"/shared/{tag}-executor")
    seen.append(loop.time())
    await asyncio.to_thread(_make, f"/shared/{tag}-thread")
    seen.append(loop.time())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.sleep(100), timeout=3)
    seen.append(loop.time())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.5):
            await asyncio.sleep(10)
    seen.append(loop.time())
    return seen


def _two_hosts(seed: int) -> tuple[World, list[object]]:
    world = World(seed=seed)
    processes = [world.spawn(world.host(host), asyncio.run, _every_wait(host))
                 for host in ("a", "b")]
    world.run()
    return world, [process.result() for process in processes]


def test_asyncio_sleeps_timeouts_and_executors_run_on_virtual_time():
    world, results = _two_hosts(seed=1)
    assert results == [[0, 5, 7, 9, 12, 13.5]] * 2
    assert world.now == 13.5
    assert sorted(world.server.listdir("/shared")) == [
        "a-executor", "a-thread", "b-executor", "b-thread"]


def test_the_same_seed_gives_the_same_asyncio_run_after_other_worlds():
    first = _two_hosts(seed=4)[0].trace.digest()
    _two_hosts(seed=5)
    assert _two_hosts(seed=4)[0].trace.digest() == first


async def _spin() -> None:
    while True:
        await asyncio.sleep(0)


async def _sleep_forever() -> None:
    while True:
        await asyncio.sleep(1)


@pytest.mark.parametrize("body", [_spin, _sleep_forever])
def test_an_endless_event_loop_is_stopped_by_max_events(body):
    world = World(max_events=500)
    process = world.spawn(world.host("a"), asyncio.run, body())
    with pytest.raises(RunawaySimulation, match="max_events=500 "):
        world.run()
    assert isinstance(process.exception(), ProcessNotFinished)


def test_a_world_stopped_mid_loop_unwinds_its_event_loop():
    world = World()
    process = world.spawn(world.host("a"), asyncio.run, asyncio.to_thread(time.sleep, 100))
    world.run(until=10)
    world.close()
    assert isinstance(process.exception(), ProcessNotFinished)


def test_asyncio_outside_the_world_is_untouched():
    _two_hosts(seed=1)  # routes installed
    assert asyncio.run(asyncio.sleep(0, result="real")) == "real"


def _loop_thread_program():
    # A library's loop thread (zarr keeps one): the loop is made in the
    # process's main thread and run forever by another simulated thread;
    # coroutines are handed to it with run_coroutine_threadsafe.
    import threading

    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()

    async def nap():
        await asyncio.sleep(5)
        return time.monotonic()

    woke = asyncio.run_coroutine_threadsafe(nap(), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    runner.join()
    loop.close()
    return woke


def test_a_loop_run_by_another_thread_than_its_creator_waits_on_the_worlds_clock():
    # It waited in the real select until the step timeout (issue 30, item 3).
    w = World(seed=1)
    p = w.spawn(w.host("a"), _loop_thread_program)
    w.run()
    assert p.result() == pytest.approx(5.0) and w.now == pytest.approx(5.0)
