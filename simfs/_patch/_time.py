"""Routes for ``time``: sleeps yield to the scheduler, clocks read virtual time.

``time.time()`` inside the world is a fixed epoch (2026-01-01) plus virtual
time, so timestamps are as deterministic as the rest of a run.  CPU clocks
(``process_time``) stay real: they measure the simulator, not the program.
"""

from __future__ import annotations

import time

from .._clock import NS_PER_S
from .._scheduler import current_process
from ._registry import patch


def install() -> None:
    real_sleep = time.sleep
    real_monotonic = time.monotonic
    real_monotonic_ns = time.monotonic_ns
    real_perf_counter = time.perf_counter
    real_perf_counter_ns = time.perf_counter_ns
    real_time = time.time
    real_time_ns = time.time_ns

    def sleep(seconds: float) -> None:
        process = current_process()
        if process is None:
            return real_sleep(seconds)
        process.syscalls.sleep(seconds)
        return None

    def monotonic() -> float:
        process = current_process()
        if process is None:
            return real_monotonic()
        return process.scheduler.clock.now_ns / NS_PER_S

    def monotonic_ns() -> int:
        process = current_process()
        if process is None:
            return real_monotonic_ns()
        now: int = process.scheduler.clock.now_ns
        return now

    def perf_counter() -> float:
        process = current_process()
        if process is None:
            return real_perf_counter()
        return process.scheduler.clock.now_ns / NS_PER_S

    def perf_counter_ns() -> int:
        process = current_process()
        if process is None:
            return real_perf_counter_ns()
        now: int = process.scheduler.clock.now_ns
        return now

    def time_() -> float:
        process = current_process()
        if process is None:
            return real_time()
        return (process.host.world.epoch_ns + process.scheduler.clock.now_ns) / NS_PER_S

    def time_ns() -> int:
        process = current_process()
        if process is None:
            return real_time_ns()
        now: int = process.host.world.epoch_ns + process.scheduler.clock.now_ns
        return now

    for name, route in (("sleep", sleep), ("monotonic", monotonic),
                        ("monotonic_ns", monotonic_ns), ("perf_counter", perf_counter),
                        ("perf_counter_ns", perf_counter_ns), ("time", time_),
                        ("time_ns", time_ns)):
        patch(time, name, route)
