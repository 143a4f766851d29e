"""Discrete-event scheduling of simulated processes, and the thread baton.

Two batons pass control between simulated processes; a program cannot tell
them apart and the same seed gives the same trace on both.  The default
(``_greenlets``) runs every process of a world as a greenlet on one engine
OS thread and swaps the thread-local interpreter state on each switch
(``_tstate``).  This module's ``Scheduler`` is the other: one OS thread per
process, a lock each, selected with ``SIMFS_BATON=thread``.  Measured for
issue 16 on the 2-CPU CI machine, a pass between OS threads costs 11-18 µs
with 2 threads and 23-25 µs with 1,000 (a ring of ``_thread`` locks, no
simfs); a greenlet switch with its thread-state swap about 1 µs at any
count (``python bench/bench_core.py``, host scaling).

Either way a pass is paid only when a different process runs next: a
process that is the only runnable one, or that the chooser picks again,
passes its yield points without any switch, and a sleep with nothing due
before it moves the clock in place.  With many hosts polling in step the
chooser seldom picks the running process again, so a poll costs about two
passes where it costs about one with two hosts.

Exactly one holds the baton: the running process, or the thread that called
``run()``.  A process gives the baton up at every simulated syscall and
sleep; the scheduler code runs in whichever process holds it.
Virtual time moves only when nothing is runnable, straight to the next timer.
When two or more processes are runnable at one instant the *chooser* picks
one; it is asked only then, so a Hypothesis choice sequence stays short.

A chooser given as a plain callable is called on the thread that called
``run()``, because Hypothesis's ``data.draw`` works only on the test's own
thread; the seeded default and recorded replays are drawn in place.
"""

from __future__ import annotations

import _thread
import heapq
import itertools
import os
import random
import time
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._errors import (
    BlockedOutsideSimulation,
    ChooserError,
    HostCrashed,
    ProcessKilled,
    ProcessNotFinished,
    RunawaySimulation,
)
from . import _routing
from ._clock import VirtualClock
from ._modules import MAIN, ModuleView, switch_to

if TYPE_CHECKING:
    from .._os._seam import SyscallSeam

# How the thread baton starts a process's OS thread.  The native guard
# (simfs/_patch/_guards/_native_guard.py, on by default) replaces it, so that
# every process thread filters itself; the engine never imports the routes.
thread_starter: Callable[[Callable[..., object], tuple[Any, ...]], object] = \
    _thread.start_new_thread
# How the greenlet baton starts an engine OS thread (every process of a world
# runs on one), and what it calls each time that thread turns to a process or
# back to the world's own code (None: no one asks).  The guard replaces both:
# the engine thread inherits its filter, and its supervisor is told, through
# shared memory, which process runs there.
engine_starter: Callable[[Callable[..., object], tuple[Any, ...]], object] = \
    _thread.start_new_thread
engine_turns: Callable[[int, Process | None], None] | None = None

# Process states.
NEW: Final = 0
RUNNABLE: Final = 1
RUNNING: Final = 2
SLEEPING: Final = 3
BLOCKED: Final = 4
DETACHED: Final = 5  # will never run again (crashed host, exited group's daemon)
DONE: Final = 6

_STATE_NAMES: Final = ("new", "runnable", "running", "sleeping", "blocked", "detached", "done")

# Routing: which simulated process, if any, the calling OS thread is
# (``routing.process``; unset or None outside the world).  ``current_process()``
# reads it; the hottest routes read it inline, and ``outside_world`` clears it.
# It lives in ``_routing``, which ``_modules`` reads too.
routing = _routing.routing


# Teardown resumes unfinished processes in rounds until all have ended.
_STOP_ROUNDS: Final = 50
# How often, per step_timeout, the watchdog samples a running process's progress.
_SAMPLES: Final = 4
# The share of a sample's real time a thread inside a simulated call must
# have spent on a CPU to count as working (a thread blocked on a real lock
# or socket spends none; one doing the simulation's work spends nearly all,
# less what other processes of the machine take).
_BUSY_SHARE: Final = 0.01


# Bound before any route replaces the time module's functions.
_clock_gettime = time.clock_gettime
_cpu_clock_of = getattr(time, "pthread_getcpuclockid", None)


def _thread_cpu_s(thread_id: int) -> float | None:
    """CPU seconds the real OS thread ``thread_id`` has used; None once it
    has ended (or where the platform has no per-thread CPU clock)."""
    if _cpu_clock_of is None:
        return None
    try:
        return _clock_gettime(_cpu_clock_of(thread_id))
    except OSError:
        return None


class Placement(Protocol):
    """Where a process runs, as far as the engine cares: a name for its messages."""

    @property
    def name(self) -> str: ...


def current_process() -> Process | None:
    """The simulated process running on this OS thread, or None outside the world."""
    return getattr(routing, "process", None)


class ProcessGroup:
    """What one simulated OS process shares between its threads.

    The descriptor table, working directory, pid, umask and the owner of its
    POSIX (lockf) locks belong to the OS process, not to a thread.  So do the
    interpreter's own counters (``threading``'s ``Thread-N`` names, the
    ``ThreadPoolExecutor-N`` prefix): a real program starts them at 1 in
    every process, so here each simulated process has its own.

    So do its environment and resource limits (``World.spawn`` hands them
    over, as exec does; see ``simfs/_os/_machine.py``): ``environ`` is what
    ``os.environ`` shows (the interpreter's copy, made at start); ``native``
    is the C library's environment that ``os.putenv`` and ``os.unsetenv``
    change, as in a real process, where ``putenv`` does not update
    ``os.environ``.  Both start equal.  Keys and values are bytes, as
    ``os.environ``'s own store holds them on POSIX.  ``limits`` holds the
    resource limits the process set (setrlimit); unset ones are the defaults.
    """

    __slots__ = ("_counters", "_random", "cwd", "cwd_id", "environ", "fds", "limits",
                 "live_threads", "modules", "native", "own_state", "pid", "rng_seed", "umask")

    def __init__(self, pid: int, cwd: str, rng_seed: int,
                 variables: Mapping[str, str] | None = None) -> None:
        self.pid = pid
        self.cwd = cwd
        self.umask = 0o022
        self.environ = {os.fsencode(name): os.fsencode(value)
                        for name, value in (variables or {}).items()}
        self.native = dict(self.environ)
        self.limits: dict[int, tuple[int, int]] = {}
        # The working directory's file handle once chdir set one: relative
        # paths start from it, and go stale with it (docs/nfs-facts.md, "Stale
        # handles").
        self.cwd_id: int | None = None
        self.fds: dict[int, Any] = {}
        self.live_threads: list[Process] = []
        self.rng_seed = rng_seed
        self._random: random.Random | None = None
        self._counters: dict[str, int] = {}
        # State a route keeps for this OS process where the real module keeps
        # it for the interpreter, by the route's name (linecache's cache of
        # the simulated files the process read).
        self.own_state: dict[str, Any] = {}
        # The process's own copies of the program's modules (``_modules``);
        # MAIN, the test's own, when the world shares them.
        self.modules: ModuleView = MAIN

    def random(self) -> random.Random:
        if self._random is None:
            self._random = random.Random(self.rng_seed)
        return self._random

    def next_number(self, counter: str, first: int) -> int:
        """The next value of one of this process's interpreter counters."""
        value = self._counters.get(counter, first)
        self._counters[counter] = value + 1
        return value


class Process:
    """One simulated process or thread: a callable running on a host.

    ``result()`` returns the callable's value or re-raises its exception.

    ``native_id`` is the thread's id as the kernel would number it (the
    process's pid for its first thread, a fresh number from the world's pid
    space for each further thread, as Linux allocates tids) and ``ident`` the
    ``threading.get_ident()`` value; both come from the world, so they repeat
    with the seed.  ``thread`` is the ``threading.Thread`` the program sees as
    ``current_thread()``.
    """

    __slots__ = ("_abandoned", "_baton", "_daemon", "_error", "_group", "_host", "_ident",
                 "_importing", "_in_call", "_joiners", "_kill", "_last_call", "_name", "_native_id",
                 "_os_thread", "_parent", "_pid", "_scheduler", "_started", "_state", "_strand",
                 "_syscalls", "_target", "_value", "_wait_token", "_waiting_on", "_woken", "thread")

    def __init__(self, scheduler: Scheduler, pid: int, name: str, host: Placement,
                 target: Callable[[], object], group: ProcessGroup, parent: Process | None,
                 daemon: bool, native_id: int) -> None:
        self._scheduler = scheduler
        self._pid = pid
        self._native_id = native_id
        # Real idents are pthread_t addresses, never below the kernel's
        # mmap_min_addr (64 KiB); small world-made numbers cannot collide with
        # a real thread's key in threading._active.
        self._ident = native_id
        self.thread: Any = None
        self._name = name
        self._host = host
        self._target = target
        self._group = group
        self._parent = parent
        self._daemon = daemon
        self._state = NEW
        self._baton = _thread.allocate_lock()
        self._baton.acquire()
        # The greenlet and saved thread state when a greenlet baton runs it.
        self._strand: Any = None
        self._started = False
        self._wait_token = 0
        self._woken = False
        self._waiting_on = ""
        self._last_call: tuple[str, str] | None = None
        # Whether a simulated call of this process is running now
        # (``Syscalls._run``), and the real OS thread it runs on (set as it
        # starts; a greenlet never leaves its engine thread): the watchdog
        # reads that thread's CPU clock (see ``_busy_in_call``).
        self._in_call = False
        self._os_thread = 0
        self._kill: BaseException | None = None
        self._abandoned = False
        # Module bodies this process is running now (``_modules``): an import
        # is not a point where another process may run (see yield_running).
        self._importing = 0
        self._joiners: list[Process] = []
        self._value: object = None
        self._error: BaseException | None = None
        # The process's syscall layer, set by the world as it adds the
        # process: the routes reach the simulation through this seam only.
        self._syscalls: SyscallSeam

    # -- read-only views: the world and the scheduler set these -----------------
    # Views over the underscored slots; at run time each is a property over
    # operator.attrgetter, a C getter: routes read syscalls and kill on every
    # call, and a Python getter there cost about 5% of a poll's instructions
    # (bench/bench_core.py --instructions).

    if TYPE_CHECKING:
        @property
        def name(self) -> str:
            """The process's name in traces, beliefs and errors."""
            ...

        @property
        def host(self) -> Placement:
            """The host it runs on."""
            ...

        @property
        def pid(self) -> int:
            """Its process id inside the world (``os.getpid()`` there)."""
            ...

        @property
        def native_id(self) -> int:
            """The kernel's id for this thread (``threading.get_native_id()`` inside)."""
            ...

        @property
        def ident(self) -> int:
            """``threading.get_ident()`` inside this thread."""
            ...

        @property
        def parent(self) -> Process | None:
            """The thread that started this one; None for a process's first thread."""
            ...

        @property
        def daemon(self) -> bool:
            """Whether it is a daemon thread, which the world does not wait for."""
            ...

        @property
        def group(self) -> ProcessGroup:
            """What its threads share: descriptors, working directory, environment, modules."""
            ...

        @property
        def syscalls(self) -> SyscallSeam:
            """Its syscall layer: the one way down for the routes (``simfs/_os/_seam.py``)."""
            ...

        @property
        def kill(self) -> BaseException | None:
            """What stops it at its next call (a crash, the world's teardown), or None."""
            ...

        @property
        def last_call(self) -> tuple[str, str] | None:
            """Its last traced call, as (op, path shown), for error messages."""
            ...

    else:
        name = property(attrgetter("_name"), doc="The process's name in traces and errors.")
        host = property(attrgetter("_host"), doc="The host it runs on.")
        pid = property(attrgetter("_pid"), doc="Its process id (``os.getpid()`` inside).")
        native_id = property(attrgetter("_native_id"),
                             doc="The kernel's id for this thread (``get_native_id()``).")
        ident = property(attrgetter("_ident"), doc="``threading.get_ident()`` inside.")
        parent = property(attrgetter("_parent"),
                          doc="The thread that started this one; None for a first thread.")
        daemon = property(attrgetter("_daemon"),
                          doc="Whether it is a daemon thread, which the world does not wait for.")
        group = property(attrgetter("_group"),
                         doc="What its threads share: descriptors, cwd, environment, modules.")
        syscalls = property(attrgetter("_syscalls"),
                            doc="Its syscall layer: the one way down for the routes.")
        kill = property(attrgetter("_kill"),
                        doc="What stops it at its next call (a crash, the teardown), or None.")
        last_call = property(attrgetter("_last_call"),
                             doc="Its last traced call, as (op, path shown), for errors.")

    def __repr__(self) -> str:
        return f"<Process {self.name!r} on {self.host.name!r}: {_STATE_NAMES[self._state]}>"

    @property
    def done(self) -> bool:
        """Whether the process has finished (returned, raised or was stopped)."""
        return self._state == DONE

    @property
    def active(self) -> bool:
        """Whether the process may still run: neither finished nor detached for good."""
        return self._state != DONE and self._state != DETACHED

    def group_random(self) -> random.Random:
        """The seeded generator behind os.urandom and the random module in this process."""
        return self.group.random()

    def describe(self) -> str:
        """One line for error messages: who, where, doing what."""
        call = self._last_call
        last = "none" if call is None else f"{call[0]}({call[1]!r})"
        waiting = f", waiting on {self._waiting_on}" if self._waiting_on else ""
        return (f"{self.name!r} on host {self.host.name!r} ({_STATE_NAMES[self._state]}"
                f"{waiting}; last call {last})")

    def result(self) -> object:
        """The return value of the process's callable.

        Raises:
            ProcessNotFinished: the process has not ended yet.
            BaseException: whatever the callable raised, re-raised.
        """
        if self._state != DONE:
            raise ProcessNotFinished(f"process {self.describe()} has not finished")
        if self._error is not None:
            raise self._error
        return self._value

    @property
    def shared_modules(self) -> frozenset[str]:
        """Top-level packages this process used without a copy of its own.

        With per-process modules, packages holding extension modules (numpy,
        torch) are one copy for every process; see ``SharedModuleWarning``.
        """
        return frozenset(self.group.modules.shared) if self.group.modules is not MAIN \
            else frozenset()

    def exception(self) -> BaseException | None:
        """What the callable raised, or None; raises if it has not finished."""
        if self._state != DONE:
            raise ProcessNotFinished(f"process {self.describe()} has not finished")
        return self._error


def exit_status(code: object) -> int:
    """The status an OS process exits with after ``raise SystemExit(code)``.

    As CPython's ``handle_system_exit`` (Python/pythonrun.c): None is 0, an
    int is itself, anything else is printed and gives 1.
    """
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code)
    return 1


class Scheduler:
    """Owns the virtual clock, the runnable set and the timers."""

    def __init__(self, clock: VirtualClock, choose: Callable[[int], int], *,
                 choose_on_main: bool, step_timeout: float, max_events: int,
                 processes: list[Process] | None = None,
                 on_exit: Callable[[Process], None] | None = None) -> None:
        self.clock = clock
        self._choose = choose
        self._choose_on_main = choose_on_main
        self.step_timeout = step_timeout
        self.max_events = max_events
        # Every process of the world, for the runaway report (the world's own list).
        self.processes: list[Process] = [] if processes is None else processes
        self.choices: list[int] = []
        self.runnable: list[Process] = []
        self.timers: list[tuple[int, int, Any, int]] = []
        self._seq = itertools.count()
        self.current: Process | None = None
        self.until_ns: int | None = None
        self.progress = 0
        self._main_baton = _thread.allocate_lock()
        self._main_baton.acquire()
        self._need_choice = False
        self.closing = False
        # Whether teardown ever left a process behind (its thread or greenlet
        # still parked), so that its engine is never reused.
        self.abandoned_any = False
        self.broken: BaseException | None = None
        self.fatal: BaseException | None = None
        self.on_exit: Callable[[Process], None] = on_exit or (lambda process: None)

    # -- called by the running process ---------------------------------------

    def checkpoint(self) -> Process:
        """The running process, after honouring a pending kill."""
        process: Process = routing.process
        if process._kill is not None:
            raise process._kill
        return process

    def yield_now(self) -> None:
        """A yield point: the caller stays runnable; someone else may run first."""
        self.yield_running(self.checkpoint())

    def yield_running(self, process: Process) -> None:
        """``yield_now`` for the running process the caller already holds.

        The syscall path has its process at hand; reading it back from the
        thread-local would cost as much as the yield itself when nothing
        else is runnable.
        """
        if process._kill is not None:
            raise process._kill
        self.progress += 1
        if self.progress > self.max_events:
            self._stop_runaway(process)
        if not self.runnable and not (self.timers and self.timers[0][0] <= self.clock.now_ns):
            return
        if process._importing:
            # Python's import locks are real locks, one per module name for
            # the whole interpreter: a second process importing the same
            # name while this one runs its body would wait on one for real.
            # A module body's syscalls run, but nothing else runs between them.
            return
        process._state = RUNNABLE
        self.runnable.append(process)
        self._dispatch(process)

    def sleep_until(self, when_ns: int) -> None:
        self.sleep_until_running(self.checkpoint(), when_ns)

    def sleep(self, seconds_ns: int) -> None:
        self.sleep_running(self.checkpoint(), seconds_ns)

    def sleep_running(self, process: Process, seconds_ns: int) -> None:
        """``sleep`` for the running process the caller already holds."""
        if process._kill is not None:
            raise process._kill
        self.sleep_until_running(process, self.clock.now_ns + seconds_ns)

    def sleep_until_running(self, process: Process, when_ns: int) -> None:
        """``sleep_until`` for the running process the caller already holds,
        having honoured its kill (a poll's sleep calls this directly)."""
        self.progress += 1
        if self.progress > self.max_events:
            self._stop_runaway(process)
        clock = self.clock
        if when_ns <= clock.now_ns:
            self.yield_running(process)
            return
        timers = self.timers
        if (not self.runnable and (not timers or timers[0][0] > when_ns) and not self.closing
                and (self.until_ns is None or when_ns <= self.until_ns)):
            # Nothing else can happen before this sleeper wakes, so the
            # scheduler would pick it next at when_ns anyway: move time on in
            # place (the same run, without the timer's push and pop).
            clock.now_ns = when_ns
            process._wait_token += 2  # as the push and the firing would
            return
        process._state = SLEEPING
        process._wait_token += 1
        heapq.heappush(timers, (when_ns, next(self._seq), process, process._wait_token))
        self._dispatch(process)

    def block(self, waiting_on: str, deadline_ns: int | None = None) -> bool:
        """Park until ``wake()``; True if woken, False if the deadline passed."""
        process = self.checkpoint()
        self.progress += 1
        if self.progress > self.max_events:
            self._stop_runaway(process)
        process._state = BLOCKED
        process._woken = False
        process._waiting_on = waiting_on
        process._wait_token += 1
        if deadline_ns is not None:
            heapq.heappush(self.timers, (deadline_ns, next(self._seq), process,
                                         process._wait_token))
        self._dispatch(process)
        process._waiting_on = ""
        return process._woken

    def _stop_runaway(self, process: Process) -> None:
        """Stop the whole run: it passed ``max_events`` scheduling events.

        Counted at every yield, sleep and wait, not per trace event, so a
        ``while True: time.sleep(1)`` or a timed lock wait in a loop stops
        too.  The process is not handed the error to catch (a bare ``except``
        in its loop would keep it spinning); it parks, ``run()`` raises, and
        teardown unwinds it like every other unfinished process.
        """
        active = [p for p in self.processes if p._state not in (DONE, DETACHED)]
        shown = "; ".join(p.describe() for p in active[:10])
        if len(active) > 10:
            shown += f"; and {len(active) - 10} more"
        self.fatal = RunawaySimulation(
            f"the run passed max_events={self.max_events} scheduling events (syscalls, "
            f"sleeps and waits) at {self.clock.now:g} virtual s without finishing; a loop "
            f"waits for something that never happens? Still active: {shown}. Pass "
            "run(until=...) to stop at a virtual time, or raise World(max_events=...)")
        self._pass(None, process)
        if process._kill is not None:
            raise process._kill

    def add(self, process: Process) -> None:
        """A new process: runnable now, it starts when the scheduler picks it."""
        process._state = RUNNABLE
        self.runnable.append(process)

    def join(self, process: Process, child: Process, deadline_ns: int | None) -> None:
        """Block ``process`` (the running one) until ``child`` ends or ``deadline_ns`` passes."""
        while child._state not in (DONE, DETACHED):
            child._joiners.append(process)
            if not self.block(f"join of {child.name!r}", deadline_ns):
                if process in child._joiners:
                    child._joiners.remove(process)
                break

    def wake(self, process: Process) -> None:
        """Make a blocked process runnable at the current instant."""
        if process._state != BLOCKED:
            return
        process._state = RUNNABLE
        process._wait_token += 1
        process._woken = True
        self.runnable.append(process)

    def call_at(self, when_ns: int, callback: Callable[[], None]) -> None:
        """Run an internal callback (a delayed close, a crash) at a virtual time."""
        heapq.heappush(self.timers, (max(when_ns, self.clock.now_ns), next(self._seq),
                                     callback, 0))

    def detach(self, process: Process, reason: str) -> None:
        """Take a process out of scheduling for good (it is unwound at teardown)."""
        if process._state in (DONE, DETACHED):
            return
        if process._state == RUNNABLE:
            self.runnable.remove(process)
        process._state = DETACHED
        process._wait_token += 1
        if process._error is None:
            process._error = HostCrashed(f"process {process.name!r} stopped: {reason}")

    # -- choosing what runs next ------------------------------------------------

    def _next(self, on_main: bool) -> Process | None:
        """The next process to run, advancing time as needed; None stops the run.

        Returns ``self`` (the scheduler) as a marker when the chooser must be
        asked on the main thread.
        """
        runnable = self.runnable
        while True:
            if runnable:
                count = len(runnable)
                if count == 1:
                    return runnable.pop()
                if self._choose_on_main and not on_main:
                    self._need_choice = True
                    return None
                return runnable.pop(self._draw(count))
            timers = self.timers
            # A process woken before its deadline leaves its timer behind;
            # time must not move to it (asyncio's 300 s executor-shutdown
            # timeout on 3.13 would otherwise end every run at +300 s).
            while timers and self._stale(timers[0]):
                heapq.heappop(timers)
            if not timers or self.closing:
                return None
            when = timers[0][0]
            if self.until_ns is not None and when > self.until_ns:
                return None
            self.clock.advance_to(when)
            self._fire_due(when)

    def _draw(self, count: int) -> int:
        choice = self._choose(count)
        if isinstance(choice, bool) or not isinstance(choice, int) or not 0 <= choice < count:
            raise ChooserError(
                f"the chooser returned {choice!r} for a choice among {count} runnable "
                f"processes; it must return an int in range({count})")
        self.choices.append(choice)
        return choice

    @staticmethod
    def _stale(timer: tuple[int, int, Any, int]) -> bool:
        """A process's timer whose wait already ended (woken, or waiting anew)."""
        target, token = timer[2], timer[3]
        return isinstance(target, Process) and (
            target._wait_token != token or target._state not in (SLEEPING, BLOCKED))

    def _fire_due(self, now: int) -> None:
        timers = self.timers
        while timers and timers[0][0] <= now:
            _, _, target, token = heapq.heappop(timers)
            if isinstance(target, Process):
                if target._wait_token == token and target._state in (SLEEPING, BLOCKED):
                    target._state = RUNNABLE
                    target._wait_token += 1
                    self.runnable.append(target)
            else:
                target()

    # -- handing the baton on ---------------------------------------------------

    def _pick(self, on_main: bool) -> Process | None:
        """``_next`` with failures turned into a stop of the whole run."""
        if self.closing:
            return None
        try:
            return self._next(on_main)
        except BaseException as error:  # chooser errors, Hypothesis's StopTest, bugs
            self.fatal = error
            self._need_choice = False
            return None

    def _resume(self, process: Process) -> None:
        self.current = process
        process._state = RUNNING
        switch_to(process.group.modules)
        if process._started:
            process._baton.release()
        else:
            process._started = True
            thread_starter(self._thread_body, (process,))

    def _hand_on(self, process: Process | None, caller: Process | None = None) -> None:
        if process is None:
            if caller is not None and caller._abandoned:
                return  # teardown stopped waiting for this thread long ago
            self.current = None
            switch_to(MAIN)
            self._main_baton.release()
        else:
            self._resume(process)

    def _dispatch(self, process: Process) -> None:
        following = self._pick(on_main=False)
        if following is process:
            process._state = RUNNING
            return
        self._pass(following, process)
        if process._kill is not None:
            raise process._kill

    def _pass(self, following: Process | None, caller: Process) -> None:
        """Hand the baton to ``following`` (None: the thread that runs the world).

        Returns when ``caller`` holds the baton again.  The switching
        machinery: an OS thread per process here, greenlets in
        ``GreenletScheduler``.
        """
        self._hand_on(following, caller)
        caller._baton.acquire()

    def _exit(self, following: Process | None, caller: Process) -> None:
        """Hand the baton on from a process that has ended, for good."""
        self._hand_on(following, caller)

    def _thread_body(self, process: Process) -> None:
        """The thread baton's OS thread of one process, known as a world's own."""
        ident = _routing.real_get_ident()
        _routing.world_threads.add(ident)
        try:
            self._bootstrap(process)
        finally:
            _routing.world_threads.discard(ident)

    def _bootstrap(self, process: Process) -> None:
        routing.process = process
        process._os_thread = _routing.real_get_ident()
        try:
            if process._kill is not None:
                raise process._kill
            process._value = process._target()
        except BaseException as error:  # the process's own failure, kept for result()
            if process._kill is None and isinstance(error, SystemExit) \
                    and exit_status(error.code) == 0:
                pass  # sys.exit(0), sys.exit(): a process that succeeded
            elif process._kill is None:
                process._error = error
            elif process._error is None:
                # Stopped by the world: whatever the unwinding raised (ProcessKilled,
                # trio's Cancelled) is not the program's outcome.
                process._error = ProcessNotFinished(
                    f"process {process.name!r} was stopped before it finished")
        finally:
            routing.process = None
        process._state = DONE
        try:
            self.on_exit(process)
        except BaseException as error:
            self.fatal = error
        for joiner in process._joiners:
            self.wake(joiner)
        process._joiners.clear()
        self._exit(self._pick(on_main=False), process)

    # -- called by the thread that runs the world -----------------------------------

    def run(self, until_ns: int | None) -> None:
        """Run until ``until_ns``, or until nothing can happen any more."""
        if self.broken is not None:
            raise self.broken
        self.until_ns = until_ns
        self._hand_on_from_main(self._pick(on_main=True))

    def take_fatal(self) -> BaseException | None:
        """The error that stopped the last run (a runaway, a chooser's), once."""
        fatal, self.fatal = self.fatal, None
        return fatal

    @property
    def quiescent(self) -> bool:
        """Nothing runnable and no timer pending: nothing can happen any more."""
        return not self.runnable and not self.timers

    def _hand_on_from_main(self, process: Process | None) -> None:
        while process is not None:
            self._resume(process)
            self._wait_for_baton()
            if not self._need_choice:
                return
            self._need_choice = False
            process = self._pick(on_main=True)

    def _wait_for_baton(self) -> None:
        """Wait for the baton, watching that the running process keeps yielding.

        Progress is sampled every quarter of ``step_timeout`` and a process is
        reported after ``step_timeout`` of real time with none, so the report
        comes at most a quarter late and states the limit that was applied.
        (Sampled once per ``step_timeout``, a process that went quiet just
        after a sample was reported after nearly twice the limit.)
        """
        timeout = self.step_timeout
        seen = self.progress
        quiet_samples = 0
        busy: tuple[int, float] | None = None
        while not self._main_baton.acquire(timeout=timeout / _SAMPLES):
            if self.progress != seen:
                seen = self.progress
                quiet_samples = 0
                continue
            busy, working = self._busy_in_call(busy, timeout / _SAMPLES)
            if working:
                quiet_samples = 0
                continue
            quiet_samples += 1
            if quiet_samples < _SAMPLES:
                continue
            stuck = self.current
            name, host, last = "?", "?", "none"
            if stuck is not None:
                name, host = stuck.name, stuck.host.name
                if stuck._last_call is not None:
                    last = f"{stuck._last_call[0]}({stuck._last_call[1]!r})"
            self.broken = BlockedOutsideSimulation(name, host, last, timeout)
            self._stuck(stuck)
            raise self.broken

    def _busy_in_call(self, before: tuple[int, float] | None, interval: float
                      ) -> tuple[tuple[int, float] | None, bool]:
        """Whether the running process is working inside a simulated call.

        A single call can take seconds of real time without a yield (one
        ``write`` of 256 MiB fills 65,536 cached pages, and on a loaded
        machine that took more than 10 s), yet it is simfs's own work, not a
        wait on something real: its thread is on a CPU.  So a sample counts
        as progress when the process is inside a call (``Syscalls._run``)
        and that call's thread used at least ``_BUSY_SHARE`` of the sample's
        interval on a CPU since the last sample.  A thread blocked on a real
        lock or socket uses none, and a program spinning outside any call is
        never inside one: both are still reported after ``step_timeout``.

        ``before`` is the last sample, (thread, CPU seconds); returns this
        sample and the verdict.
        """
        process = self.current
        if process is None or not process._in_call:
            return None, False
        thread_id = process._os_thread
        cpu = _thread_cpu_s(thread_id)
        if cpu is None:
            return None, False
        working = (before is not None and before[0] == thread_id
                   and cpu - before[1] >= _BUSY_SHARE * interval)
        return (thread_id, cpu), working

    def stop_all(self, processes: list[Process]) -> None:
        """Unwind every unfinished process so that its OS thread ends.

        Every process is marked first, then each is resumed in turn until all
        have ended: one may only finish after another has unwound (a trio run
        waits for its worker thread), so this takes rounds, not one pass.
        """
        self.closing = True
        pending = []
        for process in processes:
            if process._state == DONE:
                continue
            if not process._started:
                process._state = DONE
                if process._error is None:
                    process._error = ProcessNotFinished(f"process {process.name!r} never ran")
                continue
            process._kill = ProcessKilled()
            pending.append(process)
        for _ in range(_STOP_ROUNDS):
            pending = [process for process in pending if process._state != DONE]
            if not pending:
                break
            for process in pending:
                if process._state == DONE:
                    continue
                if not self._resumable():
                    break
                self._resume(process)
                if not self._main_baton.acquire(timeout=self.step_timeout):
                    # It ignores the kill (a bare except around a loop) or is
                    # blocked on something real: leave its daemon thread behind.
                    process._abandoned = self.abandoned_any = True
                    process._state = DONE
                    self._stuck(process)
        for process in pending:
            if process._state != DONE:
                process._abandoned = self.abandoned_any = True
                process._state = DONE
        self.runnable.clear()
        self.timers.clear()
        self.closing = False
        self._stopped()

    def _resumable(self) -> bool:
        """Whether teardown can still resume a process (a greenlet baton may be stuck)."""
        return True

    def _stuck(self, process: Process | None) -> None:
        """``process`` kept the baton past ``step_timeout``: its OS thread is lost."""

    def _stopped(self) -> None:
        """Every process has ended or been abandoned: release what the baton holds."""

    def park(self) -> None:
        """Give the baton back while the world is stopping, without unwinding.

        For code that must outlive a kill a little (trio finishing its
        cancelled tasks): it waits here until teardown resumes it again.
        """
        process: Process = routing.process
        process._state = BLOCKED
        self._pass(None, process)

