"""Simulated locks: the two primitives every other ``threading`` type stands on.

``threading.Condition``, ``Event``, ``Semaphore``, ``Barrier`` and
``queue.Queue`` are pure Python built on ``Lock``/``RLock`` (and on
``_allocate_lock`` for a condition's waiters).  Created inside a simulated
process, those locks are these classes, so every wait, timed ones included,
becomes a wait on the world's scheduler, on virtual time.

A release hands the lock to the longest waiter (FIFO), so who gets it next
is a function of the schedule alone.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from .._errors import SimfsError
from ._clock import seconds_to_ns
from ._scheduler import Process, current_process

if TYPE_CHECKING:
    from types import TracebackType

# The holder of a lock taken outside any simulated process (the test body,
# interpreter shutdown touching a queue a simulated pool left behind).
_OUTSIDE = object()


def _deadline(process: Process, blocking: bool, timeout: float) -> int | None:
    if not blocking:
        if timeout != -1:
            raise ValueError("can't specify a timeout for a non-blocking call")
        return None
    if timeout == -1:
        return None
    if timeout < 0:
        raise ValueError("timeout value must be a non-negative number")
    return process._scheduler.clock.now_ns + seconds_to_ns(timeout, "timeout")


class SimLock:
    """``threading.Lock`` for simulated processes."""

    __slots__ = ("__weakref__", "_holder", "_waiters")

    def __init__(self) -> None:
        self._holder: object = None
        self._waiters: deque[Process] = deque()

    def __repr__(self) -> str:
        return f"<simulated {'locked' if self._holder is not None else 'unlocked'} Lock>"

    def locked(self) -> bool:
        return self._holder is not None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        process = current_process()
        if self._holder is None:
            self._holder = process if process is not None else _OUTSIDE
            return True
        if process is None:
            if not blocking:
                return False
            raise SimfsError("a lock created inside the world is held by a simulated process; "
                             "code outside the world cannot wait for it")
        deadline = _deadline(process, blocking, timeout)
        if not blocking:
            return False
        self._waiters.append(process)
        if process._scheduler.block("a Lock", deadline):
            return True  # release() handed the lock over and woke this process
        if process not in self._waiters:
            # The timeout fired and, at the same virtual instant, before this
            # process ran again, release() took it off the queue and handed
            # it the lock (the wake was a no-op on a process already
            # runnable).  It holds the lock now: say so.  (The holder alone
            # does not tell: a Condition's waiter lock is held by the very
            # process that waits on it.)
            return True
        self._waiters.remove(process)
        return False

    def release(self) -> None:
        if self._holder is None:
            raise RuntimeError("release unlocked lock")
        if self._waiters:
            following = self._waiters.popleft()
            self._holder = following
            following._scheduler.wake(following)
        else:
            self._holder = None

    __enter__ = acquire

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()

    def _at_fork_reinit(self) -> None:
        self._holder = None
        self._waiters.clear()


class SimRLock:
    """``threading.RLock`` for simulated processes (owned by a thread, counted)."""

    __slots__ = ("__weakref__", "_count", "_lock", "_owner")

    def __init__(self) -> None:
        self._lock = SimLock()
        self._owner: object = None
        self._count = 0

    def __repr__(self) -> str:
        return f"<simulated RLock owner={self._owner!r} count={self._count}>"

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = current_process() or _OUTSIDE
        if self._owner is me:
            self._count += 1
            return True
        if not self._lock.acquire(blocking, timeout):
            return False
        self._owner = me
        self._count = 1
        return True

    def release(self) -> None:
        if self._owner is not (current_process() or _OUTSIDE) or self._count == 0:
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if self._count == 0:
            self._owner = None
            self._lock.release()

    __enter__ = acquire

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()

    def locked(self) -> bool:
        return self._lock.locked()

    # The protocol threading.Condition uses to wait on an RLock.
    def _is_owned(self) -> bool:
        return self._owner is (current_process() or _OUTSIDE)

    def _release_save(self) -> tuple[int, object]:
        if self._count == 0:
            raise RuntimeError("cannot release un-acquired lock")
        state = (self._count, self._owner)
        self._count = 0
        self._owner = None
        self._lock.release()
        return state

    def _acquire_restore(self, state: tuple[int, object]) -> None:
        self._lock.acquire()
        self._count, self._owner = state

    def _recursion_count(self) -> int:
        return self._count if self._is_owned() else 0

    def _at_fork_reinit(self) -> None:
        self._lock._at_fork_reinit()
        self._owner = None
        self._count = 0
