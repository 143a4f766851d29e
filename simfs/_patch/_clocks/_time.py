"""Routes for ``time``: sleeps yield to the scheduler, clocks read virtual time.

``time.time()`` inside the world is a fixed epoch (2026-01-01) plus virtual
time, so timestamps are as deterministic as the rest of a run.  The calendar
functions that default to "now" (``localtime()``, ``gmtime()``, ``ctime()``,
``asctime()``, ``strftime(format)``) read that same clock: in C they call the
system clock directly, past the ``time.time`` route.  CPU clocks
(``process_time``) stay real: they measure the simulator, not the program.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..._engine._clock import NS_PER_S
from ..._engine._scheduler import Process, current_process, routing
from .._registry import patch


def _clock_route(real: Callable[[], float | int], *, wall: bool, ns: bool
                 ) -> Callable[[], float | int]:
    """A clock that reads virtual time inside the world and ``real`` outside it.

    ``wall`` reads the wall clock (time.time), not the monotonic one; ``ns`` returns integer ns.
    """

    def route() -> float | int:
        process = current_process()
        if process is None:
            return real()
        syscalls = process.syscalls
        now = syscalls.wall_ns if wall else syscalls.now_ns
        return now if ns else now / NS_PER_S

    return route


def _virtual_seconds() -> float | None:
    """Seconds since the Unix epoch on the world's clock, or None outside it."""
    process = current_process()
    if process is None:
        return None
    return process.syscalls.wall_ns / NS_PER_S


def _calendar_route(real: Callable[..., Any], convert: Callable[[float], Any]
                    ) -> Callable[..., Any]:
    """``real(when=now)``: a missing or None time argument means the world's now."""

    def route(*args: Any) -> Any:
        if args and args[-1] is not None:
            return real(*args)
        now = _virtual_seconds()
        if now is None:
            return real(*args)
        return real(*args[:-1], convert(now)) if args else real(convert(now))

    return route


def _strftime_route(real: Callable[..., str], localtime: Callable[[float], Any]
                    ) -> Callable[..., str]:
    def strftime(format: str, *when: Any) -> str:
        if when:
            return real(format, *when)
        now = _virtual_seconds()
        return real(format) if now is None else real(format, localtime(now))

    return strftime


def install() -> None:
    real_localtime = time.localtime
    for name, convert in (("localtime", float), ("gmtime", float), ("ctime", float),
                          ("asctime", real_localtime)):
        patch(time, name, _calendar_route(getattr(time, name), convert))
    patch(time, "strftime", _strftime_route(time.strftime, real_localtime))
    # datetime's "now" is the same clock read through another module.
    from . import _datetime

    _datetime.install()

    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        process: Process | None = getattr(routing, "process", None)  # current_process(), inlined
        if process is None:
            return real_sleep(seconds)
        process.syscalls.sleep(seconds)
        return None

    patch(time, "sleep", sleep)
    for name, wall, ns in (("monotonic", False, False), ("monotonic_ns", False, True),
                           ("perf_counter", False, False), ("perf_counter_ns", False, True),
                           ("time", True, False), ("time_ns", True, True)):
        patch(time, name, _clock_route(getattr(time, name), wall=wall, ns=ns))
