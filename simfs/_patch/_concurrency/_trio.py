"""trio inside the world: a clock on virtual time and seeded scheduling.

Each simulated process that runs async code runs its own ``trio.run`` on its
own OS thread (trio keeps run state in a ``threading.local``, which is why
simfs uses threads, not greenlets).  Three things make that deterministic:

- ``SimClock`` tells trio the world's virtual time.  When trio has nothing
  to run it asks how long to sleep; the clock instead parks the process in
  the world's scheduler until the next trio deadline, or until something
  calls ``run_sync_soon`` (a simulated thread handing back a result, trio's
  own shutdown), and answers 0.
- trio's batch shuffling draws from a generator owned by that run's clock,
  seeded from the world (``trio._core._run._r`` is a proxy that picks it),
  with trio's deterministic-scheduling mode on, as under Hypothesis.
- ``trio.to_thread.run_sync`` starts a simulated thread per call instead of
  using trio's process-wide thread cache, whose idle workers would outlive
  the world.

Hypothesis can drive trio too: draw the world's seed (outside trio's loop,
never inside it), and trio's choices follow from it.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from typing import Any

import outcome
import trio
import trio._core._entry_queue as trio_entry_queue
import trio._core._run as trio_run
import trio._core._thread_cache as trio_thread_cache

from ..._engine._clock import NS_PER_S
from ..._engine._scheduler import Process, current_process
from ..._errors import ProcessKilled
from .._registry import escape, patch

# id(EntryQueue) -> the clock of the simulated trio.run it belongs to.  Every
# run_sync_soon (a thread's result, trio's own shutdown) goes through it.
_CLOCKS: dict[int, SimClock] = {}


class SimClock(trio.abc.Clock):
    """trio's clock inside the world: virtual time, waits handed to the scheduler."""

    def __init__(self, process: Process) -> None:
        self._process = process
        self._syscalls = process.syscalls
        self.random = random.Random(f"simfs-trio:{process.group.rng_seed}:{process.pid}")
        self._waiting = False
        self._pending_wakeup = False
        self._cancelled = False
        self._queue_id: int | None = None

    def start_clock(self) -> None:
        self._queue_id = id(trio_run.GLOBAL_RUN_CONTEXT.runner.entry_queue)
        _CLOCKS[self._queue_id] = self

    def stop_clock(self) -> None:
        if self._queue_id is not None:
            _CLOCKS.pop(self._queue_id, None)

    def current_time(self) -> float:
        now: float = self._syscalls.now_ns / NS_PER_S
        return now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        if self._process.kill is not None:
            return self._unwind()
        if self._pending_wakeup:
            self._pending_wakeup = False
            return 0
        now_ns = self._syscalls.now_ns
        if deadline <= now_ns / NS_PER_S:
            return 0
        wake_ns = None if math.isinf(deadline) else max(math.ceil(deadline * NS_PER_S),
                                                        now_ns + 1)
        self._waiting = True
        try:
            self._syscalls.block("trio: the next deadline or a thread's result", wake_ns)
        except ProcessKilled:
            return self._unwind()
        finally:
            self._waiting = False
        return 0

    def _unwind(self) -> float:
        """The world is stopping this process: cancel the whole run, let trio unwind.

        Raising inside trio's loop would abandon its tasks mid-flight (and
        their coroutines complain at garbage collection); cancelling the
        system nursery, which holds the main task, lets every task run its
        cleanup and trio shut down as after a normal return.
        """
        if not self._cancelled:
            self._cancelled = True
            nursery = trio_run.GLOBAL_RUN_CONTEXT.runner.system_nursery
            if nursery is not None:
                nursery.cancel_scope.cancel()
            return 0
        # Still waiting, e.g. for a worker thread that has yet to unwind:
        # let the teardown run the others and come back.
        self._syscalls.park()
        return 0

    def thread_reported(self) -> None:
        """Someone called run_sync_soon: wake the run if it is parked."""
        if self._waiting:
            self._syscalls.wake(self._process)
        else:
            self._pending_wakeup = True


class _RunRandom:
    """Stands in for trio's module-level ``random.Random``: per-run inside the world."""

    def __init__(self, real: random.Random) -> None:
        self._real = real

    def _target(self) -> random.Random:
        runner = getattr(trio_run.GLOBAL_RUN_CONTEXT, "runner", None)
        clock = getattr(runner, "clock", None)
        return clock.random if isinstance(clock, SimClock) else self._real

    def random(self) -> float:
        return self._target().random()

    def shuffle(self, items: list[Any]) -> None:
        self._target().shuffle(items)

    def uniform(self, low: float, high: float) -> float:
        return self._target().uniform(low, high)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


def run_async(target: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run an ``async def`` process body under trio.run with the world's clock."""
    return trio.run(functools.partial(target, *args, **kwargs))


def install() -> None:
    real_run = trio.run
    real_run_sync_soon = trio_entry_queue.EntryQueue.run_sync_soon
    real_start_thread_soon = trio_thread_cache.start_thread_soon

    def run(async_fn: Callable[..., Any], *args: Any, clock: Any = None, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real_run(async_fn, *args, clock=clock, **kwargs)
        if clock is not None and not isinstance(clock, SimClock):
            raise escape(process, f"trio.run(clock={clock!r}): inside the world the clock is "
                                  "the world's virtual time")
        sim_clock = clock or SimClock(process)
        try:
            return real_run(async_fn, *args, clock=sim_clock, **kwargs)
        finally:
            sim_clock.stop_clock()

    def run_sync_soon(self: Any, sync_fn: Callable[..., object], *args: Any,
                      idempotent: bool = False) -> None:
        real_run_sync_soon(self, sync_fn, *args, idempotent=idempotent)
        clock = _CLOCKS.get(id(self))
        if clock is not None:
            clock.thread_reported()

    def start_thread_soon(fn: Callable[[], Any], deliver: Callable[[Any], object],
                          name: str | None = None) -> None:
        process = current_process()
        if process is None:
            return real_start_thread_soon(fn, deliver, name)

        def job() -> None:
            deliver(outcome.capture(fn))

        process.syscalls.spawn_thread(job, name or "trio-thread", daemon=True)
        return None

    patch(trio, "run", run)
    patch(trio_run, "run", run)
    patch(trio_entry_queue.EntryQueue, "run_sync_soon", run_sync_soon)
    patch(trio_thread_cache, "start_thread_soon", start_thread_soon)
    if not isinstance(trio_run._r, _RunRandom):
        trio_run._r = _RunRandom(trio_run._r)  # type: ignore[assignment]
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
