"""The trace: a running digest over the whole run, and a bounded view of it."""

from __future__ import annotations

import os
import time

import pytest

from simfs import World
from simfs._engine._trace import DEFAULT_TRACE_KEEP

POLLS = 6_000  # > 2 fold batches of 4,096, so the running hash is exercised


def _pollers(keep: int | None, seed: int = 3) -> World:
    world = World(seed=seed, trace_keep=keep)
    world.server.mkdir("/shared/d")
    for name in ("a", "b"):
        host = world.host(name)

        def poll() -> None:
            for _ in range(POLLS // 2):
                os.path.exists("/shared/d/marker")
                time.sleep(0.1)

        world.spawn(host, poll)
    world.run()
    return world


def test_a_bounded_trace_has_the_digest_and_length_of_the_full_one():
    full = _pollers(keep=None)
    bounded = _pollers(keep=50)
    assert len(bounded.trace) == len(full.trace) > POLLS
    assert bounded.trace.digest() == full.trace.digest()
    assert list(bounded.trace) == list(full.trace)[-50:]
    assert bounded.trace.dropped == len(full.trace) - 50
    assert full.trace.dropped == 0


def test_the_running_digest_still_tells_different_runs_apart():
    assert _pollers(keep=10, seed=3).trace.digest() != _pollers(keep=10, seed=4).trace.digest()


def test_a_digest_read_mid_run_does_not_change_the_final_one():
    world = World(seed=1)
    world.server.mkdir("/shared/d")
    host = world.host("a")

    def poll() -> None:
        for _ in range(5_000):
            os.path.exists("/shared/d/x")
            time.sleep(0.1)

    world.spawn(host, poll)
    world.run(until=200.0)
    early = world.trace.digest()
    world.run()
    reference = World(seed=1)
    reference.server.mkdir("/shared/d")
    reference.spawn(reference.host("a"), poll)
    reference.run()
    assert early != world.trace.digest() == reference.trace.digest()


def _recorded(world: World, count: int) -> World:
    for index in range(count):
        world.trace.record(index, "a", "p", "stat", f"/shared/{index}", "ENOENT")
    return world


def test_a_default_world_keeps_a_bounded_window_and_says_what_it_no_longer_has():
    count = DEFAULT_TRACE_KEEP + 7
    bounded = _recorded(World(seed=1), count)
    everything = _recorded(World(seed=1, trace_keep=None), count)
    assert len(bounded.trace) == len(everything.trace) == count
    assert bounded.trace.digest() == everything.trace.digest()
    kept = list(bounded.trace)
    assert len(kept) == DEFAULT_TRACE_KEEP
    assert kept == list(everything.trace)[7:]
    assert bounded.trace.select(path="/shared/6") == []
    assert len(everything.trace.select(path="/shared/6")) == 1
    first, second = bounded.trace.format().split("\n")[:2]
    assert first == (f"(7 earlier events not kept: the trace keeps the last "
                     f"{DEFAULT_TRACE_KEEP:,}; World(trace_keep=None) keeps every event)")
    assert "/shared/7 " in second
    assert bounded.trace.format(limit=2) == everything.trace.format(limit=2)
    assert not everything.trace.format().startswith("(")


@pytest.mark.parametrize("keep", [-1, 1.5, True])
def test_a_bad_trace_keep_is_named(keep):
    with pytest.raises(ValueError, match="trace keep must be None or an int >= 0"):
        World(trace_keep=keep)


def _byte_names(name: bytes) -> World:
    world = World(seed=1)

    def create() -> None:
        for _ in range(5_000):  # past a fold batch too
            os.close(os.open(b"/shared/" + name, os.O_CREAT | os.O_WRONLY, 0o644))

    world.spawn(world.host("h"), create)
    world.run()
    return world


def test_a_file_name_that_is_not_utf8_is_traced_and_digested():
    # Linux and NFS allow any bytes in a name; a bytes path shows decoded with
    # surrogateescape (os.fsdecode), and digesting it raised UnicodeEncodeError.
    world = _byte_names(b"\xff")
    assert "/shared/\udcff" in [event.path for event in world.trace]
    assert world.trace.digest() == _byte_names(b"\xff").trace.digest()
    assert world.trace.digest() != _byte_names(b"\xfe").trace.digest()
