"""Routes for ``threading`` and ``queue``: simulated threads and waits.

A ``threading.Thread`` started inside a simulated process becomes another
simulated process on the same host, sharing the descriptors (an OS thread
shares its process's).  Locks created inside the world are ``simfs._sync``
locks; ``Condition``, ``Event``, ``Semaphore``, ``Barrier`` and ``queue.Queue``
are pure Python on top of them and need no patch of their own, which is
what makes ``concurrent.futures.ThreadPoolExecutor`` work unchanged.

Every thread identity a program can observe comes from the world, never from
the interpreter's globals (docs/contributing.md: observable identifiers come from the
world): ``get_ident``/``get_native_id``, ``current_thread()`` (a simulated
process's first thread is its ``MainThread``), ``enumerate()``, the
``Thread-N`` default names and the ``ThreadPoolExecutor-N`` prefix.  The real
counters behind those names are advanced by every real thread the test
process starts, so reading them made the same seed name threads, and
schedule them, differently in the 1st and the 1,000th world of a process.
"""

from __future__ import annotations

import _thread
import concurrent.futures
import concurrent.futures.thread as futures_thread
import logging
import queue
import threading
from collections.abc import Callable
from types import GenericAlias
from typing import Any

from ..._engine._clock import seconds_to_ns
from ..._engine._scheduler import Process, current_process
from ..._engine._sync import SimLock, SimRLock
from ..._errors import ProcessKilled
from .._registry import escape, patch

_RealSimpleQueue = queue.SimpleQueue
_PySimpleQueue = queue._PySimpleQueue  # type: ignore[attr-defined]


class _SimpleQueueMeta(type):
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _RealSimpleQueue | _PySimpleQueue)


class SimpleQueue(metaclass=_SimpleQueueMeta):
    """``queue.SimpleQueue``: the C queue outside the world, the Python one inside.

    The C version blocks in C on a real lock; the pure-Python one waits on a
    ``threading.Semaphore``, which inside the world is simulated.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if current_process() is None:
            return _RealSimpleQueue(*args, **kwargs)
        return _PySimpleQueue(*args, **kwargs)

    __class_getitem__: Any = classmethod(GenericAlias)


def _simulated_child(thread: threading.Thread) -> Process | None:
    child: Process | None = getattr(thread, "_simfs_process", None)
    return child


def _thread_of(process: Process) -> threading.Thread:
    """The ``threading.Thread`` a simulated process sees as its current thread.

    A process started by ``Thread.start`` has its own; a process spawned by
    the world gets a ``MainThread`` (it is an OS process's first thread),
    and a thread the world started for a library (trio's workers) one
    named after it.  Made on first use and never registered in
    ``threading._active``, so nothing of it outlives the world.
    """
    thread: threading.Thread | None = process.thread
    if thread is None:
        main = process.parent is None
        thread = threading.Thread(name="MainThread" if main else process.name,
                                  daemon=False if main else process.daemon)
        thread._ident = process.ident  # type: ignore[attr-defined]
        thread._native_id = process.native_id  # type: ignore[attr-defined]
        thread._started.set()  # type: ignore[attr-defined]
        thread._simfs_process = process  # type: ignore[attr-defined]
        process.thread = thread
    return thread


def _run_thread(thread: Any) -> None:
    """The body of a simulated thread: what ``Thread._bootstrap_inner`` does.

    ``SystemExit`` ends the thread quietly, as in Python.  Any other
    exception fails the thread's simulated process, so ``World.run`` reports
    it by the thread's name and host, where Python would print it through
    ``threading.excepthook`` (whose default reads source files, outside the
    simulation) and go on; a test should not pass over it unseen.
    """
    process = current_process()
    assert process is not None
    thread._ident = process.ident
    thread._native_id = process.native_id
    with threading._active_limbo_lock:  # type: ignore[attr-defined]
        threading._active[thread._ident] = thread  # type: ignore[attr-defined]
    try:
        thread.run()
    except SystemExit:
        pass
    finally:
        with threading._active_limbo_lock:  # type: ignore[attr-defined]
            threading._active.pop(thread._ident, None)  # type: ignore[attr-defined]


class _ProcessCounter:
    """A module-level ``itertools.count().__next__`` made per simulated process.

    A plain object, not a function, so that as a class attribute
    (``ThreadPoolExecutor._counter``) it is not bound as a method.
    """

    def __init__(self, real: Callable[[], int], counter: str, first: int) -> None:
        self._real = real
        self._counter = counter
        self._first = first

    def __call__(self) -> int:
        process = current_process()
        if process is None:
            return self._real()
        return process.group.next_number(self._counter, self._first)


def _world_hash(self: object) -> int:
    """``__hash__`` for objects programs keep in sets: a serial from the world.

    ``object.__hash__`` is derived from the address, so iterating a set of
    threads or futures (``ThreadPoolExecutor.shutdown`` joins
    ``self._threads``, a set; ``concurrent.futures.wait`` and
    ``as_completed`` work on sets) visits them in an order that depends on
    the allocator's history: measured, the same seed joined a pool's
    workers in a different order in one run out of two.  The serial is
    drawn at the first hash, in the world's deterministic order, and kept.
    """
    namespace = self.__dict__
    serial: int | None = namespace.get("_simfs_hash")
    if serial is None:
        process = current_process()
        serial = (object.__hash__(self) if process is None
                  else process.syscalls.next_object_serial())
        namespace["_simfs_hash"] = serial
    return serial


def _install_identities() -> None:
    real_get_ident = _thread.get_ident
    real_get_native_id = _thread.get_native_id
    real_current_thread = threading.current_thread
    real_enumerate = threading.enumerate
    real_active_count = threading.active_count
    real_newname = threading._newname  # type: ignore[attr-defined]

    def get_ident() -> int:
        process = current_process()
        return real_get_ident() if process is None else process.ident

    def get_native_id() -> int:
        process = current_process()
        return real_get_native_id() if process is None else process.native_id

    def current_thread() -> threading.Thread:
        process = current_process()
        return real_current_thread() if process is None else _thread_of(process)

    def live_threads(process: Process) -> list[threading.Thread]:
        return [_thread_of(thread) for thread in process.group.live_threads
                if thread.active]

    def enumerate_threads() -> list[threading.Thread]:
        process = current_process()
        return real_enumerate() if process is None else live_threads(process)

    def active_count() -> int:
        process = current_process()
        return real_active_count() if process is None else len(live_threads(process))

    def newname(name_template: str = "Thread-%d") -> str:
        # threading numbers default names from one counter per interpreter,
        # starting at 1: per simulated process here.
        process = current_process()
        if process is None:
            name: str = real_newname(name_template)
            return name
        return name_template % process.group.next_number("threading", 1)

    for owner in (_thread, threading):
        patch(owner, "get_ident", get_ident)
        patch(owner, "get_native_id", get_native_id)
    for name in ("current_thread", "currentThread"):
        patch(threading, name, current_thread)
    for name in ("active_count", "activeCount"):
        patch(threading, name, active_count)
    patch(threading, "enumerate", enumerate_threads)
    patch(threading, "_newname", newname)
    # Set directly, not through patch(): registered as a replacement of
    # object.__hash__ it would be rebound into classes that have no __dict__.
    for hashed in (threading.Thread, concurrent.futures.Future):
        hashed.__hash__ = _world_hash  # type: ignore[method-assign]
    executor = futures_thread.ThreadPoolExecutor
    patch(executor, "_counter", _ProcessCounter(executor._counter,  # type: ignore[attr-defined]
                                                "ThreadPoolExecutor", 0))


def install() -> None:
    _install_identities()
    real_allocate = _thread.allocate_lock
    real_rlock = threading.RLock
    real_start = threading.Thread.start
    real_join = threading.Thread.join
    real_is_alive = threading.Thread.is_alive

    def allocate_lock() -> Any:
        return real_allocate() if current_process() is None else SimLock()

    def rlock(*args: Any, **kwargs: Any) -> Any:
        return real_rlock(*args, **kwargs) if current_process() is None else SimRLock()

    def start(self: threading.Thread) -> None:
        process = current_process()
        if process is None:
            return real_start(self)
        if not self._initialized:  # type: ignore[attr-defined]
            raise RuntimeError("thread.__init__() not called")
        if self._started.is_set():  # type: ignore[attr-defined]
            raise RuntimeError("threads can only be started once")
        child = process.syscalls.spawn_thread(lambda: _run_thread(self), self.name, self.daemon)
        child.thread = self
        self._simfs_process = child  # type: ignore[attr-defined]
        # Thread.start waits until the new thread has set its identity
        # (_bootstrap_inner sets ident and native_id before _started): both
        # are known when start() returns.
        self._ident = child.ident  # type: ignore[attr-defined]
        self._native_id = child.native_id  # type: ignore[attr-defined]
        self._started.set()  # type: ignore[attr-defined]
        return None

    def join(self: threading.Thread, timeout: float | None = None) -> None:
        child = _simulated_child(self)
        if child is None:
            return real_join(self, timeout)
        process = current_process()
        if process is child:
            raise RuntimeError("cannot join current thread")
        if process is None or not child.active:
            return None  # outside the world nothing more will happen to it
        deadline = None
        if timeout is not None:
            deadline = process.syscalls.now_ns + seconds_to_ns(max(timeout, 0), "timeout")
        process.syscalls.join(child, deadline)
        return None

    def is_alive(self: threading.Thread) -> bool:
        child = _simulated_child(self)
        if child is None:
            return real_is_alive(self)
        return child.active

    executor: Any = futures_thread.ThreadPoolExecutor
    patch(executor, "submit", _refusing_outside_pools(executor.submit))
    futures_logger = futures_thread._base.LOGGER  # type: ignore[attr-defined]
    if not any(isinstance(known, _UnwoundWorkers) for known in futures_logger.filters):
        futures_logger.addFilter(_UnwoundWorkers())
    patch(threading, "_allocate_lock", allocate_lock)
    patch(threading, "Lock", allocate_lock)
    patch(threading, "RLock", rlock)
    patch(threading.Thread, "start", start)
    patch(threading.Thread, "join", join)
    patch(threading.Thread, "is_alive", is_alive)
    patch(queue, "SimpleQueue", SimpleQueue)


class _UnwoundWorkers(logging.Filter):
    """Drops ``concurrent.futures``' "Exception in worker" for a worker the
    world unwound (``ProcessKilled``: its process or world ended while the
    worker waited for work).  A real process's threads end with it without
    a word; here every idle pool worker left at teardown printed a
    CRITICAL traceback to the test's stderr (measured: zarr's loop
    executor, six tracebacks a run).  A worker's own errors still show."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, ProcessKilled)


def _refusing_outside_pools(real_submit: Callable[..., Any]) -> Callable[..., Any]:
    """``ThreadPoolExecutor.submit``, refused inside the world for a pool made outside it.

    A pool made before the world (a module-level executor, one the test
    body used) has a real work queue and real locks, and its workers, once
    started, are real threads of the test process: work handed to it from a
    simulated process runs outside the simulation (its file calls reach the
    real disk) or waits on a real lock until the step timeout.  Measured
    before this refusal (issue 30): a module-level executor wrote the real
    disk under the export's path from inside a run.  Refused at ``submit``,
    before any work is queued, naming the pool's real threads.

    A pool made inside a world whose workers have ended (the world that
    made it was torn down; the pool was kept in a shared module or the
    test's own objects and used in a later world) would queue the work for
    no one: ``World.run`` ended in a ``Deadlock`` that named only "a Lock".
    A live pool's workers exit only at ``shutdown``, so ended workers mean
    their process is gone: refused too, naming the process that made it.
    """

    def submit(self: Any, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real_submit(self, fn, *args, **kwargs)
        real_threads: list[str] = []
        ended: list[Process] = []
        for thread in list(self._threads):
            child = _simulated_child(thread)
            if child is None:
                real_threads.append(thread.name)
            elif child.done:
                ended.append(child)
        name = getattr(fn, "__qualname__", None) or repr(fn)[:60]
        if ended and not self._shutdown:
            maker = ended[0]
            while maker.parent is not None:
                maker = maker.parent
            earlier = ("" if getattr(maker.host, "world", None)
                       is getattr(process.host, "world", None) else " of an earlier world")
            raise escape(process, (
                f"ThreadPoolExecutor.submit({name}) to a pool whose worker threads "
                f"({', '.join(sorted(repr(child.name) for child in ended))}) ended with "
                f"the process that made it, {maker.name!r} on host {maker.host.name!r}"
                f"{earlier}: a "
                "real process's threads end with it, so the work would never run; make "
                "the executor in the process that uses it"))
        if real_threads or self._work_queue.__class__ is _RealSimpleQueue:
            real_threads.sort()
            started = (f"its worker threads {', '.join(map(repr, real_threads))} are real "
                       "threads of the test process" if real_threads else
                       "its work queue and locks are the test process's real ones")
            raise escape(process, (
                f"ThreadPoolExecutor.submit({name}) to a pool made outside the world: "
                f"{started}, started outside the world, so the work would run outside "
                "the simulation (its file calls on the real disk) or wait on a real lock; "
                "make the executor inside the simulated process (its workers are then "
                "simulated threads)"))
        return real_submit(self, fn, *args, **kwargs)

    return submit
