"""The baton: greenlets on one engine thread by default, an OS thread per process on request.

Whichever baton passes control between simulated processes, a program must
not tell them apart: the same seed gives the same trace, each process keeps
its own thread-local state (trio's run context and filelock's lock context
are ``threading.local``s), asyncio's running loop is per process, and a
process stuck outside the simulation is still reported.
"""

from __future__ import annotations

import _thread
import asyncio
import os
import sys
import threading
import time

import pytest
import trio

from simfs import BlockedOutsideSimulation, World, posix
from simfs._engine._greenlets import GreenletScheduler
from simfs._engine._scheduler import Scheduler
from tests.simfs.test_determinism import world_digest

BATONS = ("greenlet", "thread")

# Made outside every world, as trio's GLOBAL_RUN_CONTEXT and filelock's
# ThreadLocalFileContext are made at import time.
_shared_local = threading.local()


@pytest.fixture(params=BATONS)
def baton(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SIMFS_BATON", request.param)
    return str(request.param)


def test_simfs_baton_selects_the_scheduler_a_world_gets(baton: str):
    expected = GreenletScheduler if baton == "greenlet" else Scheduler
    assert type(World()._scheduler) is expected


def test_the_greenlet_baton_is_the_default(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SIMFS_BATON", raising=False)
    assert isinstance(World()._scheduler, GreenletScheduler)


def test_a_baton_name_simfs_does_not_know_is_refused_with_the_names_it_knows(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SIMFS_BATON", "fibers")
    with pytest.raises(ValueError, match=r"'fibers'.*greenlet, thread"):
        World()


def test_both_batons_give_the_same_trace_digest_for_each_seed(monkeypatch: pytest.MonkeyPatch):
    digests = {}
    for name in BATONS:
        monkeypatch.setenv("SIMFS_BATON", name)
        digests[name] = [world_digest(seed) for seed in range(3)]
    assert digests["greenlet"] == digests["thread"]


def _keeps_its_own_local(name: str) -> tuple[object, object]:
    before = getattr(_shared_local, "owner", None)
    _shared_local.owner = name
    posix.exists("/shared/x")  # a yield point: the other process runs here
    posix.exists("/shared/y")
    return before, _shared_local.owner


def test_a_threading_local_made_outside_the_world_holds_a_value_per_process(baton: str):
    _shared_local.owner = "test thread"
    world = World(seed=3)
    a = world.spawn(world.host("a"), _keeps_its_own_local, "a")
    b = world.spawn(world.host("b"), _keeps_its_own_local, "b")
    world.run()
    assert a.result() == (None, "a")
    assert b.result() == (None, "b")
    assert _shared_local.owner == "test thread"


def _trio_and_asyncio(name: str) -> tuple[str, str]:
    async def trio_main() -> str:
        await trio.sleep(1)
        return f"trio {name}"

    async def asyncio_main() -> str:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(1)
        assert asyncio.get_running_loop() is loop
        return f"asyncio {name}"

    return trio.run(trio_main), asyncio.run(asyncio_main())


def test_trio_and_asyncio_run_in_two_processes_at_once(baton: str):
    world = World(seed=5)
    a = world.spawn(world.host("a"), _trio_and_asyncio, "a")
    b = world.spawn(world.host("b"), _trio_and_asyncio, "b")
    world.run()
    assert a.result() == ("trio a", "asyncio a")
    assert b.result() == ("trio b", "asyncio b")
    assert world.now == pytest.approx(2)


def _recurse(depth: int, at_bottom) -> object:  # type: ignore[no-untyped-def]
    return at_bottom() if depth == 0 else _recurse(depth - 1, at_bottom)


def test_a_thread_started_deep_in_a_recursion_gets_the_whole_recursion_limit(baton: str):
    # A greenlet started from the starting one would inherit its depth; the
    # engine's hub starts every process, so each begins near the bottom.
    limit = sys.getrecursionlimit()
    results: list[object] = []

    def child() -> None:
        results.append(_recurse(limit - 150, lambda: "reached"))

    def parent() -> None:
        def start_and_join() -> None:
            thread = threading.Thread(target=child)
            thread.start()
            thread.join()

        _recurse(limit - 150, start_and_join)

    world = World()
    process = world.spawn(world.host("a"), parent)
    world.run()
    process.result()
    assert results == ["reached"]


def test_after_a_process_is_stuck_outside_the_simulation_a_new_world_still_runs(baton: str):
    real_lock = _thread.allocate_lock()
    real_lock.acquire()

    def waits_for_real() -> None:
        posix.exists("/shared/x")
        real_lock.acquire()

    # 1 s, not 0.2: the watchdog also counts the real time before the first
    # simulated call (a process's import of its own modules, a gc pass).
    stuck = World(step_timeout=1.0)
    stuck.spawn(stuck.host("h"), waits_for_real)
    with pytest.raises(BlockedOutsideSimulation):
        stuck.run()
    stuck.close()
    fresh = World(seed=1)
    process = fresh.spawn(fresh.host("h"), _keeps_its_own_local, "fresh")
    fresh.run()
    assert process.result() == (None, "fresh")
    real_lock.release()


def _yields_inside_its_own_greenlet(name: str) -> str:
    import greenlet

    def child() -> str:
        time.sleep(1)  # the other process runs meanwhile: the baton leaves from here
        posix.exists("/shared/x")
        return f"{name} child done"

    return str(greenlet.greenlet(child).switch())


def test_a_process_that_runs_its_own_greenlets_can_yield_inside_one(baton: str):
    world = World(seed=2)
    a = world.spawn(world.host("a"), _yields_inside_its_own_greenlet, "a")
    b = world.spawn(world.host("b"), _yields_inside_its_own_greenlet, "b")
    world.run()
    assert (a.result(), b.result()) == ("a child done", "b child done")
    assert world.now == pytest.approx(1)


def test_a_real_thread_calling_a_routed_function_during_a_run_gets_the_real_one(
        baton: str, tmp_path):  # type: ignore[no-untyped-def]
    real_file = tmp_path / "real-file"
    real_file.write_text("on the real disk")
    go, done = _thread.allocate_lock(), _thread.allocate_lock()
    go.acquire()
    done.acquire()
    seen: list[tuple[bool, int]] = []

    def real_thread() -> None:
        go.acquire()
        seen.append((os.path.exists(real_file), threading.get_ident()))
        done.release()

    ident = _thread.start_new_thread(real_thread, ())

    def simulated() -> bool:
        posix.exists("/shared/x")
        go.release()  # the real thread runs while this process holds the baton
        done.acquire()  # a short real wait, well inside step_timeout
        return os.path.exists("/shared/x")

    world = World()
    process = world.spawn(world.host("a"), simulated)
    world.run()
    assert process.result() is False
    assert seen == [(True, ident)]


def _finishes_its_async_generator_where(starts_after_s: float, lives_s: float,
                                        loop: str = "trio") -> list[str]:
    """A run (trio's or asyncio's) that leaves an async generator suspended:
    the loop closes it as the run ends (trio's finalize_remaining, asyncio's
    shutdown_asyncgens).

    The generator's ``finally`` says on which host it ran: a real process's
    loop finalizes its own generators (sys.set_asyncgen_hooks is per OS
    thread, so per process), never another process's.
    """
    import socket

    sleep = trio.sleep if loop == "trio" else asyncio.sleep
    closed_on: list[str] = []
    kept: list[object] = []

    async def ticks():  # type: ignore[no-untyped-def]
        try:
            yield 1
            yield 2
        finally:
            closed_on.append(socket.gethostname())

    async def main() -> None:
        await sleep(1)
        generator = ticks()
        await generator.__anext__()  # first iteration: the loop's firstiter hook takes it
        await sleep(lives_s)
        kept.append(generator)  # still suspended when main returns

    time.sleep(starts_after_s)
    if loop == "trio":
        trio.run(main)
    else:
        asyncio.run(main())
    return closed_on


@pytest.mark.parametrize("loop", ["trio", "asyncio"])
def test_a_process_s_async_generators_are_finalized_by_its_own_loop(baton: str, loop: str):
    # b's run starts after a's and ends after it: on one OS thread, b's run
    # saved a's asyncgen hooks as "the thread's before" and put them back at
    # its end, so a's generator went to b's loop (closed on b, after a
    # ended) and every later run on that thread kept a's loop, and its whole
    # world, alive (measured: each refit example's world leaked, 383 objects).
    world = World(seed=4)
    a = world.spawn(world.host("a"), _finishes_its_async_generator_where, 0.0, 0.0, loop)
    b = world.spawn(world.host("b"), _finishes_its_async_generator_where, 0.5, 5.0, loop)
    world.run()
    assert a.result() == ["a"]
    assert b.result() == ["b"]


def _asyncgen_hooks() -> tuple[object, object]:
    return tuple(sys.get_asyncgen_hooks())  # type: ignore[return-value]


def test_a_process_starts_with_no_asyncgen_hooks_after_other_worlds_ran_trio(baton: str):
    for seed in range(2):
        world = World(seed=seed)
        world.spawn(world.host("a"), _finishes_its_async_generator_where, 0.0, 0.0)
        world.spawn(world.host("b"), _finishes_its_async_generator_where, 0.5, 5.0)
        world.run()
    fresh = World()
    process = fresh.spawn(fresh.host("c"), _asyncgen_hooks)
    fresh.run()
    assert process.result() == (None, None)


def test_a_closed_world_whose_trio_runs_crossed_is_freed(baton: str):
    import gc
    import weakref

    def crossed_world() -> weakref.ref[World]:
        world = World(seed=4)
        world.spawn(world.host("a"), _finishes_its_async_generator_where, 0.0, 0.0)
        world.spawn(world.host("b"), _finishes_its_async_generator_where, 0.5, 5.0)
        world.run()
        world.close()
        return weakref.ref(world)

    gone = [crossed_world() for _ in range(3)]
    gc.collect()
    # An idle engine thread keeps the last world it served until the next one.
    assert [ref() is None for ref in gone[:-1]] == [True, True]


def _traces_itself(hook: str) -> list[str]:
    """Sets a trace or profile function, lets another process run, then calls its own."""
    seen: list[str] = []

    def record(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call" and frame.f_code.co_name.startswith(("mine_", "theirs_")):
            seen.append(frame.f_code.co_name)

    def mine_after() -> None:
        pass

    setter = getattr(sys, hook)
    setter(record)
    time.sleep(1)  # the other process runs here, on the same engine thread
    mine_after()
    setter(None)
    return seen


def _runs_untraced(hook: str) -> tuple[bool, int]:
    def theirs_work() -> None:
        pass

    time.sleep(0.5)
    theirs_work()
    getter = sys.gettrace if hook == "settrace" else sys.getprofile
    return getter() is not None, sys.get_coroutine_origin_tracking_depth()


@pytest.mark.parametrize("hook", ["settrace", "setprofile"])
def test_a_trace_or_profile_function_sees_only_its_own_process(baton: str, hook: str):
    # sys.settrace and sys.setprofile are per OS thread: on the greenlet
    # baton's one engine thread a breakpoint() or a cProfile in one process
    # stopped in, or counted, every other process's frames.
    world = World(seed=6)
    a = world.spawn(world.host("a"), _traces_itself, hook)
    b = world.spawn(world.host("b"), _runs_untraced, hook)
    world.run()
    assert a.result() == ["mine_after"]
    assert b.result() == (False, 0)


def _tracks_coroutine_origins() -> int:
    sys.set_coroutine_origin_tracking_depth(7)  # asyncio's debug mode sets it for its run
    time.sleep(1)
    return sys.get_coroutine_origin_tracking_depth()


def test_coroutine_origin_tracking_depth_belongs_to_its_process(baton: str):
    world = World(seed=6)
    a = world.spawn(world.host("a"), _tracks_coroutine_origins)
    b = world.spawn(world.host("b"), _runs_untraced, "settrace")
    world.run()
    assert (a.result(), b.result()) == (7, (False, 0))
