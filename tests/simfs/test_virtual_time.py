"""Wall-clock time inside the world is the world's clock, everywhere (issue 10, item 4).

``time.time()`` was routed, but ``datetime.datetime.now()``/``utcnow()`` and
the calendar functions with no argument (``time.localtime()``, ``gmtime()``,
``ctime()``, ``asctime()``, ``strftime(fmt)``) read the system clock in C: a
2 s ``datetime`` deadline loop gave a different digest for the same seed.
"""

from __future__ import annotations

import _datetime
import copy
import datetime
import os
import pickle
import time
from datetime import datetime as bound_before_the_routes

import pytest

from simfs import World

AFTER = 2.5  # virtual seconds each program sleeps before reading the clock


def _world_seconds(world: World) -> float:
    return world.epoch_ns / 1e9 + AFTER


def _run(program):
    world = World(seed=3)
    process = world.spawn(world.host("a"), program)
    world.run()
    return world, process.result()


def test_datetime_now_utcnow_and_today_read_the_world_clock():
    def program():
        time.sleep(AFTER)
        return (datetime.datetime.now(), datetime.datetime.utcnow(),
                datetime.datetime.now(datetime.UTC), datetime.datetime.today(),
                datetime.date.today(), bound_before_the_routes.now())

    world, (now, utcnow, aware, today, date_today, bound_now) = _run(program)
    at = _world_seconds(world)
    assert now == today == bound_now == datetime.datetime.fromtimestamp(at)
    assert utcnow == datetime.datetime(2026, 1, 1, 0, 0, 2, 500000)
    assert aware == datetime.datetime(2026, 1, 1, 0, 0, 2, 500000, tzinfo=datetime.UTC)
    assert date_today == datetime.date.fromtimestamp(at)


def test_calendar_functions_without_a_time_read_the_world_clock():
    def program():
        time.sleep(AFTER)
        return (time.localtime(), time.gmtime(), time.ctime(), time.asctime(),
                time.strftime("%Y-%m-%d %H:%M:%S"), time.localtime(0))

    world, (local, gm, ctime, asctime, formatted, epoch) = _run(program)
    at = _world_seconds(world)
    assert local == time.localtime(at) and gm == time.gmtime(at)
    assert ctime == time.ctime(at) and asctime == time.asctime(time.localtime(at))
    assert formatted == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    assert epoch == time.localtime(0)  # an explicit time is left alone


def test_a_datetime_deadline_loop_ends_on_virtual_time_with_the_same_digest():
    def poll_until_deadline():
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=2)
        polls = 0
        while datetime.datetime.now() < deadline:
            os.path.exists("/shared/marker")
            time.sleep(0.1)
            polls += 1
        return polls

    def digest():
        world = World(seed=8)
        process = world.spawn(world.host("a"), poll_until_deadline)
        world.run()
        return world.trace.digest(), process.result(), world.now

    first = digest()
    assert first == digest()
    assert first[1] == 20 and first[2] == pytest.approx(2.0)


def test_datetimes_made_inside_the_world_are_real_datetimes_that_pickle_and_copy():
    def program():
        now = datetime.datetime.now()
        built = datetime.datetime(2020, 1, 2, 3, 4, 5)
        parsed = datetime.datetime.fromisoformat("2020-01-02T03:04:05")
        return (now, built, parsed, pickle.loads(pickle.dumps(now)), copy.deepcopy(now),
                isinstance(now, datetime.datetime), issubclass(type(now), datetime.datetime))

    _, (now, built, parsed, unpickled, copied, is_instance, is_subclass) = _run(program)
    assert {type(value) for value in (now, built, parsed, unpickled, copied)} == {
        _datetime.datetime}
    assert built == parsed and unpickled == now == copied
    assert is_instance and is_subclass


def test_outside_the_world_datetime_is_the_real_type_and_pickles():
    _run(lambda: None)  # routes installed
    assert datetime.datetime is _datetime.datetime
    now = datetime.datetime.now()
    assert type(now) is _datetime.datetime and pickle.loads(pickle.dumps(now)) == now


def test_an_extension_module_initialising_in_a_process_gets_the_real_datetime_type():
    # A C extension's init runs under the import system's frames and reads
    # datetime.datetime from C; Cython's cpython.datetime makes it the base
    # of its own types (pandas' _NaT).  Handed the routed subclass, pandas'
    # first import in a process failed: "__new__() takes exactly 1 positional
    # argument (4 given)" (issue 30).  _call_with_frames_removed(getattr, ...)
    # is that read, with no Python frame of its own, as the init does it.
    from importlib import _bootstrap  # type: ignore[attr-defined]

    def program():
        time.sleep(AFTER)
        by_init = _bootstrap._call_with_frames_removed(getattr, datetime, "datetime")
        return by_init, datetime.datetime, datetime.datetime.now()

    world, (by_init, by_program, now) = _run(program)
    assert by_init is _datetime.datetime
    assert by_program is not _datetime.datetime  # the program's stays routed
    assert now == datetime.datetime.fromtimestamp(_world_seconds(world))


def test_time_sleep_passed_to_spawn_before_the_routes_existed_sleeps_in_virtual_time():
    # What a user holds when they write spawn(h, time.sleep, 3) before any run().
    real_sleep = getattr(time.sleep, "__wrapped__", time.sleep)
    world = World(seed=1)
    process = world.spawn(world.host("a"), real_sleep, 3)
    world.run()
    assert process.result() is None and world.now == 3.0
    assert [event.op for event in world.trace.select(process=process.name)] == ["sleep", "exit"]
