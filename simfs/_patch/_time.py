"""Routes for ``time``: sleeps yield to the scheduler, clocks read virtual time.

``time.time()`` inside the world is a fixed epoch (2026-01-01) plus virtual
time, so timestamps are as deterministic as the rest of a run.  CPU clocks
(``process_time``) stay real: they measure the simulator, not the program.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .._engine._clock import NS_PER_S
from .._engine._scheduler import current_process
from ._registry import patch


def _clock_route(real: Callable[[], float | int], *, wall: bool, ns: bool
                 ) -> Callable[[], float | int]:
    """A clock that reads virtual time inside the world and ``real`` outside it.

    ``wall`` adds the world's epoch (time.time); ``ns`` returns integer ns.
    """

    def route() -> float | int:
        process = current_process()
        if process is None:
            return real()
        now: int = process.scheduler.clock.now_ns
        if wall:
            now += process.host.world.epoch_ns
        return now if ns else now / NS_PER_S

    return route


def install() -> None:
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        process = current_process()
        if process is None:
            return real_sleep(seconds)
        process.syscalls.sleep(seconds)
        return None

    patch(time, "sleep", sleep)
    for name, wall, ns in (("monotonic", False, False), ("monotonic_ns", False, True),
                           ("perf_counter", False, False), ("perf_counter_ns", False, True),
                           ("time", True, False), ("time_ns", True, True)):
        patch(time, name, _clock_route(getattr(time, name), wall=wall, ns=ns))
