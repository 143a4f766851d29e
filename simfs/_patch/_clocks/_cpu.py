"""CPU-time clocks inside the world: a simulated process has used no CPU time.

Simulated code runs between yields without moving the virtual clock
(computation is instant; only sleeps, waits and RPC latency take time), so
the honest CPU time of a simulated process on that clock is zero, and zero
is the same on every machine and after any history.  The real answers
measure the simulator and the test process (pytest, Hypothesis, earlier
worlds), so a program that logged or branched on them ran differently for
the same seed.  Answered inside the world:

- ``time.process_time``/``thread_time`` (and ``_ns``): 0;
- ``os.times()``: zero user and system times, ``elapsed`` the world's
  monotonic clock;
- ``resource.getrusage``: every field 0 (times, ``ru_maxrss``, faults,
  context switches);
- ``os.getloadavg()``: (0.0, 0.0, 0.0), no process has used CPU time;
- ``time.clock_gettime``/``clock_gettime_ns``: the realtime clocks read the
  world's wall clock, the monotonic ones its monotonic clock, the CPU-time
  clocks 0; a clock id simfs does not know is refused loudly.

A loop waiting for CPU time to pass (``while process_time() < t``) never
yields and is reported as a busy loop after ``step_timeout``, as one on
``time.monotonic()`` is.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..._engine._clock import NS_PER_S
from ..._engine._scheduler import Process
from .._registry import escape, in_world, patch

# clock_gettime ids (Linux, clock_gettime(2)) by what they read inside the world.
_WALL_CLOCKS = frozenset(getattr(time, name) for name in (
    "CLOCK_REALTIME", "CLOCK_REALTIME_COARSE", "CLOCK_TAI") if hasattr(time, name))
_MONOTONIC_CLOCKS = frozenset(getattr(time, name) for name in (
    "CLOCK_MONOTONIC", "CLOCK_MONOTONIC_RAW", "CLOCK_MONOTONIC_COARSE", "CLOCK_BOOTTIME",
    "CLOCK_HIGHRES", "CLOCK_UPTIME") if hasattr(time, name))
_CPU_CLOCKS = frozenset(getattr(time, name) for name in (
    "CLOCK_PROCESS_CPUTIME_ID", "CLOCK_THREAD_CPUTIME_ID", "CLOCK_PROF")
    if hasattr(time, name))


def _clock_ns(process: Process, clock_id: int, call: str) -> int:
    if clock_id in _CPU_CLOCKS:
        return 0
    if clock_id in _MONOTONIC_CLOCKS:
        return process.syscalls.now_ns
    if clock_id in _WALL_CLOCKS:
        tai = 37 * NS_PER_S if clock_id == getattr(time, "CLOCK_TAI", None) else 0
        return process.syscalls.wall_ns + tai
    raise escape(process, f"time.{call}({clock_id!r}) reads a clock simfs does not simulate; "
                          "use time.time(), time.monotonic() or CLOCK_REALTIME/MONOTONIC")


def _zero_rusage(process: Process, who: int) -> Any:
    import resource

    return resource.struct_rusage((0.0, 0.0) + (0,) * 14)


def install() -> None:
    for name, zero in (("process_time", 0.0), ("process_time_ns", 0), ("thread_time", 0.0),
                       ("thread_time_ns", 0)):
        if hasattr(time, name):
            patch(time, name, in_world(getattr(time, name),
                                     lambda process, value=zero: value))
    if hasattr(time, "clock_gettime"):
        patch(time, "clock_gettime", in_world(
            time.clock_gettime,
            lambda process, clock_id: _clock_ns(process, clock_id, "clock_gettime") / NS_PER_S))
        patch(time, "clock_gettime_ns", in_world(
            time.clock_gettime_ns,
            lambda process, clock_id: _clock_ns(process, clock_id, "clock_gettime_ns")))
    patch(os, "getloadavg", in_world(os.getloadavg, lambda process: (0.0, 0.0, 0.0)))
    patch(os, "times", in_world(os.times, lambda process: os.times_result(
        (0.0, 0.0, 0.0, 0.0, process.syscalls.now_ns / NS_PER_S))))
    try:
        import resource
    except ImportError:  # not on this platform: nothing to route
        return
    patch(resource, "getrusage", in_world(resource.getrusage, _zero_rusage))
