"""A pytest plugin that runs every test of a suite inside a simfs world.

Loaded by ``run_suite.py`` (``-p suite_plugin``), never by
this project's own tests.  Each test item gets a fresh ``World(seed=0)`` with
one host, and its whole protocol (fixture setup, the test body, teardown)
runs as one simulated process on that host, so fixtures that touch
``tmp_path`` meet the simulation too.  ``tmp_path`` is a directory on the
export.  An ``async def`` test runs under ``asyncio.run`` inside the
process, on the world's clock, instead of on pytest-asyncio's loop (which
lives outside any one world).

Needs ``-s`` (pytest's output capture swaps real descriptors with
``os.dup2``) and pytest-timeout off (``-o timeout=0``: its SIGALRM needs the main thread);
the world's own ``step_timeout`` reports a test blocked on something real.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from simfs import World
from simfs._patch import install
from simfs._patch._registry import outside_world

_EXPORT = "/shared"
_MACHINE = socket.gethostname()
STEP_TIMEOUT_S = 5.0


# The routes go in when pytest loads this plugin, before the suite's
# conftests and modules are imported, as they would be in a program that
# makes its world before importing what it tests: a module that keeps
# ``fcntl.flock`` in a list at import (portalocker's ``LOCKERS``,
# parametrized) keeps the route, which outside a world is the real call.
# Installed at the first run instead, the list kept the real builtin, which a
# test body in the world then called on a simulated descriptor (a loud
# escape, but not what the suite tests).
install()


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest) -> Path:
    """The test's own directory on the export (created inside the world)."""
    name = re.sub(r"[^\w.-]", "_", request.node.name)[:80]
    path = Path(_EXPORT, name)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _async_body(function: Callable[..., Any]) -> Callable[..., Any] | None:
    """The coroutine function behind a (possibly pytest-asyncio wrapped) test."""
    original = inspect.unwrap(function)
    return original if inspect.iscoroutinefunction(original) else None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    coroutine = _async_body(pyfuncitem.obj)
    if coroutine is None:
        return None
    names = pyfuncitem._fixtureinfo.argnames
    arguments = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(coroutine(**arguments))
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    # The last test's garbage is finalized here, outside any world.  Left to
    # Python's collector, a cycle of its objects (a ``pytest.raises`` keeps
    # the test's frame, and so its locks) was finalized during this test's
    # world, and a lock's ``__del__`` unlocked and closed *this* world's
    # descriptor of the same number (portalocker's test_bounded_semaphore
    # found it: its third semaphore took a slot the first still held).
    gc.collect()
    world = World(seed=0, step_timeout=STEP_TIMEOUT_S)
    world.server.mkdir(_EXPORT + "/.suite")  # the export exists and is not empty
    # The suite records socket.gethostname() at import, outside any world,
    # and compares lock markers with it: the one host takes the machine's name.
    host = world.host(_MACHINE)
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    process = world.spawn(host, runtestprotocol, item, nextitem=nextitem, log=True,
                          name="test")
    try:
        world.run(check=False)
    except Exception as error:  # a loud escape or runaway: the test failed in the world
        _report_world_failure(item, error)
    else:
        failure = process.exception() if process.done else None
        if failure is not None:
            _report_world_failure(item, failure)
    if not process.done or process.exception() is not None:
        _tear_down_stopped(item, nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _tear_down_stopped(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Finish the fixtures of a test the world stopped midway, in a world of their own.

    Their files went with the stopped world, so teardown code may fail; it
    must not reach the real disk, and the next test must find a clean state.
    """
    world = World(seed=0, step_timeout=STEP_TIMEOUT_S)
    setup_state = item.session._setupstate
    world.spawn(world.host(_MACHINE), setup_state.teardown_exact, nextitem, name="teardown")
    with contextlib.suppress(Exception):
        world.run(check=False)
    if setup_state.stack and nextitem is not None:
        # A finalizer the second world stopped too: drop what is left.
        needed = set(nextitem.listchain())
        for node in list(setup_state.stack):
            if node not in needed:
                del setup_state.stack[node]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    # Building the report (tracebacks read source files) is pytest's work, not the test's.
    with outside_world():
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> Any:
    with outside_world():
        return (yield)


def _report_world_failure(item: pytest.Item, error: BaseException) -> None:
    """A failure outside the test's own phases (the world stopped it): report it."""
    call = pytest.CallInfo.from_call(lambda: _raise(error), when="call")
    report = pytest.TestReport.from_item_and_call(item, call)
    item.ihook.pytest_runtest_logreport(report=report)


def _raise(error: BaseException) -> None:
    raise error
