"""Routes for ``threading`` and ``queue``: simulated threads and waits.

A ``threading.Thread`` started inside a simulated process becomes another
simulated process on the same host, sharing the descriptors (an OS thread
shares its process's).  Locks created inside the world are ``simfs._sync``
locks; ``Condition``, ``Event``, ``Semaphore``, ``Barrier`` and ``queue.Queue``
are pure Python on top of them and need no patch of their own, which is
what makes ``concurrent.futures.ThreadPoolExecutor`` work unchanged.
"""

from __future__ import annotations

import _thread
import queue
import threading
from types import GenericAlias
from typing import Any

from .._engine import _scheduler as sched
from .._engine._clock import seconds_to_ns
from .._engine._scheduler import Process, current_process
from .._engine._sync import SimLock, SimRLock
from ._registry import patch

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


def _run_thread(thread: Any) -> None:
    """The body of a simulated thread: what ``Thread._bootstrap_inner`` does."""
    thread._set_ident()
    if hasattr(thread, "_set_native_id"):
        thread._set_native_id()
    with threading._active_limbo_lock:  # type: ignore[attr-defined]
        threading._active[thread._ident] = thread  # type: ignore[attr-defined]
    try:
        thread.run()
    except SystemExit:
        pass
    except Exception:
        thread._invoke_excepthook(thread)
    finally:
        with threading._active_limbo_lock:  # type: ignore[attr-defined]
            threading._active.pop(thread._ident, None)  # type: ignore[attr-defined]


def install() -> None:
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
        world = process.host.world
        child = world._spawn_thread(process, lambda: _run_thread(self), self.name, self.daemon)
        self._simfs_process = child  # type: ignore[attr-defined]
        self._started.set()  # type: ignore[attr-defined]
        return None

    def join(self: threading.Thread, timeout: float | None = None) -> None:
        child = _simulated_child(self)
        if child is None:
            return real_join(self, timeout)
        process = current_process()
        if process is child:
            raise RuntimeError("cannot join current thread")
        if process is None or child.state in (sched.DONE, sched.DETACHED):
            return None  # outside the world nothing more will happen to it
        deadline = None
        if timeout is not None:
            deadline = process.scheduler.clock.now_ns + seconds_to_ns(max(timeout, 0), "timeout")
        while child.state not in (sched.DONE, sched.DETACHED):
            child._joiners.append(process)
            if not process.scheduler.block(f"join of {child.name!r}", deadline):
                if process in child._joiners:
                    child._joiners.remove(process)
                break
        return None

    def is_alive(self: threading.Thread) -> bool:
        child = _simulated_child(self)
        if child is None:
            return real_is_alive(self)
        return child.state not in (sched.DONE, sched.DETACHED)

    patch(threading, "_allocate_lock", allocate_lock)
    patch(threading, "Lock", allocate_lock)
    patch(threading, "RLock", rlock)
    patch(threading.Thread, "start", start)
    patch(threading.Thread, "join", join)
    patch(threading.Thread, "is_alive", is_alive)
    patch(queue, "SimpleQueue", SimpleQueue)
