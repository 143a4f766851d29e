"""A baton of greenlets: every simulated process of a world on one engine OS thread.

Why: handing the baton between OS threads costs a kernel wake-up whose price
grows with the number of threads (issue 16, measured on the 2-CPU CI
machine: a pass between ``_thread`` locks 11-18 µs with 2 threads, 23-25 µs
with 1,000), and with many hosts polling in step nearly every simulated
syscall is a pass.  A greenlet switch with the thread-state swap below
costs about 1 µs at any count (a ring of 2 to 1,000 greenlets, 3.11-3.13).
``SIMFS_BATON=thread`` selects the thread baton instead.

The thread that calls ``run()`` still only waits, as with the thread baton:
it hands the baton to one *engine* OS thread and watches it, so a process
blocked outside the simulation or spinning without a syscall is still
reported after ``step_timeout`` (``BlockedOutsideSimulation``).  On the
engine thread the *hub* greenlet starts each process's greenlet (at its own
shallow stack depth, so a process started by a deeply nested one does not
inherit that depth) and hands the baton back to ``run()``'s thread; a
process that passes the baton to another started process switches to it
directly.  One greenlet runs at a time on one thread, so one simulated
process runs at a time.  A program may run greenlets of its own inside a
process: the process resumes in whichever of them gave the baton up.

Per-thread interpreter state follows each greenlet (``_tstate``): greenlet
switches frames, ``sys.exc_info()``, contextvars and the recursion depth;
the switch here also swaps the thread-state fields that hold
``threading.local`` values, asyncio's running loop and the async generator
hooks, and (``_Tracing``) the trace and profile functions and the
coroutine origin tracking depth: a ``breakpoint()`` or a ``cProfile`` in one
process must not stop in, or count, another process's frames.

When the engine thread stops answering (a process blocked for real, or one
that ignores its kill in teardown), every process still on it is abandoned
at once: with one engine thread there is no other process to resume.
"""

from __future__ import annotations

import _thread
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from . import _scheduler
from ._clock import VirtualClock
from ._modules import MAIN, switch_to
from ._routing import real_get_ident, world_threads
from ._scheduler import RUNNING, Process, Scheduler

if TYPE_CHECKING:
    from ._tstate import ThreadStateSlots

greenlet: Any
try:
    import greenlet  # type: ignore[import-untyped,no-redef,unused-ignore]
except ImportError:  # pragma: no cover - greenlet is a dependency
    greenlet = None


def _no_loop() -> Any:
    return None


def _set_no_loop(loop: Any) -> None:
    pass


# asyncio's running loop, per OS thread in C (3.11-3.13; see ``_tstate``).
# Bound when the first engine starts, so that ``import simfs`` does not
# import asyncio (the routes import it when a world first runs).
_get_running_loop: Callable[[], Any] = _no_loop
_set_running_loop: Callable[[Any], None] = _set_no_loop


def _bind_asyncio() -> None:
    global _get_running_loop, _set_running_loop
    from asyncio import events

    _get_running_loop = events._get_running_loop
    _set_running_loop = events._set_running_loop


# The baton ``World`` uses unless SIMFS_BATON says otherwise.
DEFAULT_BATON: Final = "greenlet"
BATONS: Final = ("greenlet", "thread")


# What sys.settrace, sys.setprofile and sys.set_coroutine_origin_tracking_depth
# set for the running OS thread, when any is set: (trace, profile, depth).
# None when all three are unset, the usual case, which one comparison settles.
_Tracing = tuple[Any, Any, int] | None
_get_trace, _get_profile = sys.gettrace, sys.getprofile
_get_depth = sys.get_coroutine_origin_tracking_depth


def _tracing_now() -> _Tracing:
    trace, profile, depth = _get_trace(), _get_profile(), _get_depth()
    if trace is None and profile is None and not depth:
        return None
    return (trace, profile, depth)


def _swap_tracing(out: _Strand, into: _Strand) -> None:
    tracing = out.tracing = _tracing_now()
    if tracing is not into.tracing:
        trace, profile, depth = into.tracing or (None, None, 0)
        sys.settrace(trace)
        sys.setprofile(profile)
        sys.set_coroutine_origin_tracking_depth(depth)


class _Strand:
    """One greenlet and the thread state it left behind when it last switched out."""

    __slots__ = ("engine", "greenlet", "loop", "slots", "tracing")

    def __init__(self, engine: _Engine, glet: Any, slots: tuple[Any, ...],
                 tracing: _Tracing = None) -> None:
        self.engine = engine
        self.greenlet = glet
        self.slots = slots
        self.loop: Any = None
        # A process starts with what the engine thread had (a coverage
        # tracer installed for every thread, say), as a new OS thread does.
        self.tracing = tracing


class _Engine:
    """One engine OS thread: its wake-up lock, the world it serves, and its hub.

    A world takes an idle engine when it first runs a process and gives it
    back once every process of the world has ended (``stop_all``), so a test
    that makes hundreds of worlds starts a handful of threads, not hundreds.
    An engine whose world stopped waiting for it (``lost``) is never reused.
    """

    __slots__ = ("baton", "hub", "job", "lost", "native_id", "slots")

    def __init__(self) -> None:
        self.baton = _thread.allocate_lock()
        self.baton.acquire()
        self.lost = False
        # None when the baton is released: the thread ends (retired before a fork).
        self.job: GreenletScheduler | None = None
        self.hub: _Strand | None = None
        self.slots: ThreadStateSlots | None = None
        self.native_id = 0  # the engine thread's, once it runs


# Engines whose world has ended, waiting for the next one (list operations
# are atomic under the GIL; only threads that run worlds touch it).
_idle: list[_Engine] = []
# How long a fork waits for the idle engine threads to be gone.
_RETIRE_WAIT_S: Final = 1.0


def _retire_idle_engines() -> None:
    """Before a fork: end the parked engine threads and wait until they are gone.

    A fork copies only the calling thread, so a child would inherit idle
    engines with no thread behind them, and its first world would wait on
    one until ``step_timeout`` (BlockedOutsideSimulation).  And the parent
    would fork as a multi-threaded process: Python 3.12+ warns on every such
    fork (a DeprecationWarning, an error under ``-W error``), counting the
    OS threads, so each one must have exited, not merely be parked.  A
    thread leaves ``/proc/self/task`` within a few hundred µs of ending.
    """
    retiring = _idle[:]
    _idle.clear()
    for engine in retiring:
        engine.job = None
        engine.baton.release()
    deadline = time.monotonic() + _RETIRE_WAIT_S
    for engine in retiring:
        task = f"/proc/self/task/{engine.native_id}"
        while os.path.exists(task) and time.monotonic() < deadline:
            time.sleep(50e-6)


if hasattr(os, "register_at_fork"):
    # The child's list is empty already; cleared again in case the parent's
    # wait gave up on a thread that had not ended.
    os.register_at_fork(before=_retire_idle_engines, after_in_child=_idle.clear)


def _serve(engine: _Engine) -> None:
    """The engine thread: each time it is woken, run its world's turn."""
    from ._tstate import SlotsUnavailable, ThreadStateSlots

    _bind_asyncio()
    engine.native_id = _thread.get_native_id()
    ident = real_get_ident()
    world_threads.add(ident)  # while it lives: an idle engine serves later worlds
    failure: BaseException | None = None
    try:
        engine.slots = ThreadStateSlots()
    except SlotsUnavailable as error:  # the interpreter is not one this was measured on
        failure = error
    else:
        engine.hub = _Strand(engine, greenlet.getcurrent(), engine.slots.fresh)
    while True:
        engine.baton.acquire()
        job = engine.job
        if job is None:
            # Retired before a fork: its ident may be a new real thread's next.
            world_threads.discard(ident)
            return
        if failure is not None:
            job.fatal = failure
            job._main_baton.release()
            continue
        job._turn(engine)


class GreenletScheduler(Scheduler):
    """The scheduler with its processes as greenlets on one engine OS thread."""

    def __init__(self, clock: VirtualClock, choose: Callable[[int], int], **kwargs: Any) -> None:
        super().__init__(clock, choose, **kwargs)
        self._engine: _Engine | None = None
        # What the hub does when it next holds the baton: start or resume this
        # process, or (None) hand the baton back to run()'s thread.
        self._order: Process | None = None
        # Strands of processes that ended; the hub releases their thread state.
        self._ended: list[_Strand] = []

    # -- run()'s thread ----------------------------------------------------------

    def _resume(self, process: Process) -> None:
        self.current = process
        process._state = RUNNING
        process._started = True
        switch_to(process.group.modules)
        self._order = process
        engine = self._engine
        if engine is None:
            engine = self._engine = _idle.pop() if _idle else None
            if engine is None:
                engine = self._engine = _Engine()
                _scheduler.engine_starter(_serve, (engine,))
            engine.job = self
        engine.baton.release()

    def _resumable(self) -> bool:
        return self._engine is None or not self._engine.lost

    def _stuck(self, process: Process | None) -> None:
        if self._engine is not None:
            self._engine.lost = True

    def _stopped(self) -> None:
        engine, self._engine = self._engine, None
        # An abandoned process's greenlet stays suspended on its engine; when
        # its world is collected greenlet would unwind it there, in the middle
        # of whatever world the engine then serves.  Such an engine is left
        # parked, as the thread baton leaves an abandoned thread behind.
        if engine is not None and not engine.lost and not self.abandoned_any:
            engine.job = None
            _idle.append(engine)

    # -- the engine thread --------------------------------------------------------

    def _turn(self, engine: _Engine) -> None:
        """Run processes until the baton goes back to run()'s thread."""
        hub, slots = engine.hub, engine.slots
        assert hub is not None and slots is not None
        following = self._order
        while following is not None:
            strand = following._strand
            if strand is None:
                strand = following._strand = _Strand(
                    engine, greenlet.greenlet(self._bootstrap), slots.fresh, _tracing_now())
            self._switch(hub, strand, following)
            ended = self._ended
            if ended:
                _set_running_loop(None)  # asyncio's cache onto the hub's own dict
                while ended:
                    slots.release(ended.pop().slots)
            following = self._order
        turns = _scheduler.engine_turns
        if turns is not None:
            turns(engine.native_id, None)
        if not engine.lost:  # else run()'s thread stopped waiting for it long ago
            self._main_baton.release()

    def _switch(self, out: _Strand, into: _Strand, *args: object) -> None:
        self._switch_state(out, into)
        turns = _scheduler.engine_turns
        if turns is not None:
            # The process about to run there (None: the hub, the world's own code).
            turns(out.engine.native_id, self.current)
        # Last before the switch: a Python call after it would be reported
        # to the incoming process's tracer (pdb would step into simfs).
        _swap_tracing(out, into)
        into.greenlet.switch(*args)

    @staticmethod
    def _switch_state(out: _Strand, into: _Strand) -> None:
        slots = out.engine.slots
        assert slots is not None
        loop = out.loop = _get_running_loop()
        out.slots = slots.swap(into.slots)
        if loop is not None or into.loop is not None:
            # asyncio caches the running loop per OS thread: set it anew.
            # When neither side runs a loop the cache already says "none";
            # it may point into a dict swapped out, which _turn moves it off
            # before that dict is freed.
            _set_running_loop(into.loop)

    # -- the running process ----------------------------------------------------------

    def _pass(self, following: Process | None, caller: Process) -> None:
        strand: _Strand = caller._strand
        engine = strand.engine
        assert engine.hub is not None
        # The process may run greenlets of its own (SQLAlchemy's asyncio
        # bridge does): it resumes in the one that gave the baton up.
        strand.greenlet = greenlet.getcurrent()
        if following is None:
            self.current = None
            self._order = None
            switch_to(MAIN)
            self._switch(strand, engine.hub)
            return
        self.current = following
        following._state = RUNNING
        switch_to(following.group.modules)
        if following._strand is None:
            following._started = True
            self._order = following
            self._switch(strand, engine.hub)
        else:
            self._switch(strand, following._strand)

    def _exit(self, following: Process | None, caller: Process) -> None:
        strand: _Strand = caller._strand
        assert strand.engine.hub is not None
        self.current = following
        if following is not None:
            following._state = RUNNING
            following._started = True
            switch_to(following.group.modules)
        else:
            switch_to(MAIN)
        self._order = following
        self._switch_state(strand, strand.engine.hub)
        self._ended.append(strand)
        _swap_tracing(strand, strand.engine.hub)
        # Returning from the greenlet lands in the hub, its parent.


def baton_from_environment() -> str:
    """The baton named by ``SIMFS_BATON``, or the default.

    Raises:
        ValueError: SIMFS_BATON names no baton.
    """
    name = os.environ.get("SIMFS_BATON", "") or DEFAULT_BATON
    if name not in BATONS:
        raise ValueError(f"SIMFS_BATON={name!r} names no baton; use one of {', '.join(BATONS)}")
    return name


def make_scheduler(clock: VirtualClock, choose: Callable[[int], int], *,
                   baton: str | None = None, **kwargs: Any) -> Scheduler:
    """A scheduler with the greenlet baton where it works, else the thread baton.

    Raises:
        ValueError: ``baton`` (or SIMFS_BATON) names no baton.
    """
    name = baton_from_environment() if baton is None else baton
    if name not in BATONS:
        raise ValueError(f"baton={name!r} names no baton; use one of {', '.join(BATONS)}")
    from ._tstate import unsupported_reason

    if name == "greenlet" and greenlet is not None and unsupported_reason() is None:
        return GreenletScheduler(clock, choose, **kwargs)
    return Scheduler(clock, choose, **kwargs)
