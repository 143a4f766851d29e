"""Threads of the test process started outside the world, while a world runs (issue 30).

A pool or loop thread made before the world is a real thread: its file
calls reached the real disk under the export's path (zarr's loop thread
created a real ``.../acts.zarr/zarr.json``), and a simulated process handing
it work waited on a real lock until a misleading ``Deadlock`` or the step
timeout.  Now its calls on the export's path are refused before they act,
and handing it work from a simulated process is refused at once.
"""

from __future__ import annotations

import _thread
import asyncio
import concurrent.futures
import io
import os
import threading

import pytest

from simfs import SimulationEscape, World


def _real_thread(name: str, action):
    """A thread started before the world that runs ``action`` once a process says go.

    The process waits for it on a real lock: the real thread runs while the
    world is running (a few ms of real time, far under the step timeout).
    """
    go, done = _thread.allocate_lock(), _thread.allocate_lock()
    go.acquire()
    done.acquire()
    seen: list[BaseException] = []

    def body():
        go.acquire()
        try:
            action()
        except BaseException as error:
            seen.append(error)
        finally:
            done.release()

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()

    def program():
        go.release()
        done.acquire()

    return program, seen, thread


def _export(tmp_path) -> str:
    # The export's path exists on the real disk too, so a real write there
    # would succeed and be seen.
    export = tmp_path / "export"
    (export / "x").mkdir(parents=True)
    return str(export)


@pytest.mark.parametrize("call", ["open", "FileIO", "mkdir", "stat"])
def test_a_real_thread_started_before_the_world_is_refused_on_the_exports_path(tmp_path, call):
    export = _export(tmp_path)
    target = f"{export}/x/acts.zarr"
    actions = {
        "open": lambda: open(f"{target}.json", "w").close(),
        # Not routed: the audit hook sees it.
        "FileIO": lambda: io.FileIO(f"{target}.json", "w").close(),
        "mkdir": lambda: os.mkdir(target),
        "stat": lambda: os.stat(f"{export}/x"),
    }
    program, seen, thread = _real_thread("pool-made-before-the-world", actions[call])
    world = World(export=export)
    world.spawn(world.host("a"), program)
    with pytest.raises(SimulationEscape) as raised:
        world.run()
    thread.join()
    message = str(raised.value)
    assert "'pool-made-before-the-world'" in message
    assert "started outside the world" in message
    assert export in message
    assert seen == [raised.value]  # refused in the thread itself, before it acted
    assert sorted(os.listdir(f"{export}/x")) == []  # nothing on the real disk


def test_the_same_real_thread_reaches_the_export_path_once_the_world_has_run(tmp_path):
    export = _export(tmp_path)
    world = World(export=export)
    world.spawn(world.host("a"), os.mkdir, f"{export}/simulated")
    world.run()
    made: list[str] = []
    thread = threading.Thread(target=lambda: made.append(os.mkdir(f"{export}/x/real") or "ok"))
    thread.start()
    thread.join()
    assert made == ["ok"] and os.listdir(f"{export}/x") == ["real"]


_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="module-pool")


def _write(path: str) -> str:
    with open(path, "w") as file:
        file.write("x")
    return path


def test_submitting_to_a_pool_made_before_the_world_is_refused_at_submit(tmp_path):
    export = _export(tmp_path)
    assert _POOL.submit(int, "1").result() == 1  # its worker is a real thread now
    world = World(export=export, step_timeout=60)

    def program():
        return _POOL.submit(_write, f"{export}/x/acts.json").result()

    world.spawn(world.host("a"), program)
    with pytest.raises(SimulationEscape) as raised:
        world.run()
    message = str(raised.value)
    assert "ThreadPoolExecutor.submit(_write)" in message
    assert "'module-pool_0'" in message and "started outside the world" in message
    assert os.listdir(f"{export}/x") == []


def test_a_pool_made_before_the_world_but_never_used_is_refused_too(tmp_path):
    # Its workers would be simulated threads, but its queue is a real one,
    # on which they would wait for real.
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    world = World(export=_export(tmp_path), step_timeout=60)
    world.spawn(world.host("a"), lambda: pool.submit(int, "1").result())
    with pytest.raises(SimulationEscape, match="real ones, started outside the world"):
        world.run()
    pool.shutdown()


def test_a_pool_made_inside_the_process_still_works(tmp_path):
    export = _export(tmp_path)
    world = World(export=export)

    def program():
        os.mkdir(f"{export}/x")
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            return pool.submit(_write, f"{export}/x/acts.json").result()

    process = world.spawn(world.host("a"), program)
    world.run()
    assert process.result() == f"{export}/x/acts.json"
    assert world.server.listdir(f"{export}/x") == ["acts.json"]  # the simulated one
    assert os.listdir(f"{export}/x") == []


def _make_pool(pools):
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kept")
    pool.submit(int, "1").result()  # its worker thread starts
    pools.append(pool)  # kept past the process (as a shared module's global would be)


def test_a_pool_made_in_an_earlier_world_is_refused_in_the_next_naming_its_maker():
    # Its workers ended with the first world; before, the work was queued
    # for no one and the run ended in a Deadlock that named only "a Lock".
    pools = []
    first = World()
    first.spawn(first.host("a"), _make_pool, pools, name="maker")
    first.run()
    second = World()
    second.spawn(second.host("a"), lambda: pools[0].submit(int, "2").result())
    with pytest.raises(SimulationEscape) as raised:
        second.run()
    assert ("worker threads ('kept_0') ended with the process that made it, 'maker' on "
            "host 'a' of an earlier world:") in str(raised.value)


@pytest.fixture
def loop_thread():
    """An event loop run forever by a real thread started before the world (zarr's)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="zarr_io", daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def test_handing_a_coroutine_to_a_loop_thread_started_before_the_world_is_refused_at_once(
        tmp_path, loop_thread):
    # It waited in a real lock until the step timeout (60 s here): refused
    # at the hand-over instead, naming the loop's thread.
    export = _export(tmp_path)

    async def write():
        return _write(f"{export}/x/zarr.json")

    world = World(export=export, step_timeout=60)
    def program():
        coroutine = write()
        try:
            return asyncio.run_coroutine_threadsafe(coroutine, loop_thread).result()
        finally:
            coroutine.close()  # refused: never awaited, and no warning of it

    world.spawn(world.host("a"), program)
    with pytest.raises(SimulationEscape) as raised:
        world.run()
    message = str(raised.value)
    assert "call_soon_threadsafe" in message and "run by thread 'zarr_io'" in message
    assert os.listdir(f"{export}/x") == []


def test_running_a_loop_made_before_the_world_inside_a_process_is_refused(tmp_path):
    loop = asyncio.new_event_loop()
    world = World(export=_export(tmp_path), step_timeout=60)
    world.spawn(world.host("a"), loop.run_forever)
    with pytest.raises(SimulationEscape, match="event loop made outside the world was run"):
        world.run()
    loop.close()


def test_an_engine_thread_retired_before_a_fork_is_no_longer_one_of_the_worlds(tmp_path):
    # A new real thread may get a dead thread's ident at once (glibc reuses
    # its stack); a stale ident there exempted a pool thread from the guard
    # (seen in the fast tier after test_escapes' os.fork retired the engines).
    import sys

    from simfs._engine import _greenlets, _routing

    world = World(export=_export(tmp_path))
    world.spawn(world.host("a"), os.getpid)
    world.run()
    _greenlets._retire_idle_engines()
    assert _routing.world_threads <= set(sys._current_frames())
