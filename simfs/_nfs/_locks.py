"""Byte-range locks as the NFSv3 server's lock manager (NLM) keeps them.

Linux NFS emulates ``flock()`` with whole-file POSIX locks sent over NLM
(nfs(5), ``local_lock=none``, the default), so flock and lockf locks
conflict with each other, across hosts and within one.  Owners differ:
a flock lock belongs to the open file description, a POSIX lock to the
process, which is why closing *any* descriptor of a file drops the
process's POSIX locks on it.
"""

from __future__ import annotations

import errno
import math
from collections.abc import Hashable
from typing import TYPE_CHECKING

from .._errors import simulated_oserror

if TYPE_CHECKING:
    from .._engine._scheduler import Process, Scheduler

INFINITY = math.inf


class LockRecord:
    __slots__ = ("end", "exclusive", "owner", "start")

    def __init__(self, owner: Hashable, start: float, end: float, exclusive: bool) -> None:
        self.owner = owner
        self.start = start
        self.end = end
        self.exclusive = exclusive


class LockTable:
    """All locks on the export, keyed by file id."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._locks: dict[int, list[LockRecord]] = {}
        self._waiters: dict[int, list[Process]] = {}

    def holders(self, fileid: int) -> list[tuple[Hashable, float, float, bool]]:
        """(owner, start, end, exclusive) of every lock on a file, for tests and reports."""
        return [(r.owner, r.start, r.end, r.exclusive) for r in self._locks.get(fileid, [])]

    def _conflict(self, fileid: int, owner: Hashable, start: float, end: float,
                  exclusive: bool) -> bool:
        for record in self._locks.get(fileid, ()):
            if (record.owner != owner and record.start < end and start < record.end
                    and (exclusive or record.exclusive)):
                return True
        return False

    def lock(self, fileid: int, owner: Hashable, start: float, end: float, *,
             exclusive: bool, wait: bool, what: str) -> None:
        """Take (or convert to) a lock; wait for conflicting owners if ``wait``.

        Raises:
            BlockingIOError: a conflicting lock is held and ``wait`` is false.
        """
        while self._conflict(fileid, owner, start, end, exclusive):
            if not wait:
                raise simulated_oserror(errno.EAGAIN)
            process = self._scheduler.checkpoint()
            self._waiters.setdefault(fileid, []).append(process)
            try:
                self._scheduler.block(f"lock on {what}")
            finally:
                waiters = self._waiters.get(fileid, [])
                if process in waiters:
                    waiters.remove(process)
        self._carve(fileid, owner, start, end)
        self._locks.setdefault(fileid, []).append(LockRecord(owner, start, end, exclusive))

    def unlock(self, fileid: int, owner: Hashable, start: float = 0,
               end: float = INFINITY) -> None:
        if self._carve(fileid, owner, start, end):
            self._wake(fileid)

    def release_owner(self, owner: Hashable, fileid: int | None = None) -> None:
        """Drop every lock of ``owner`` (on one file, or on all files)."""
        for fid in [fileid] if fileid is not None else list(self._locks):
            records = self._locks.get(fid)
            if not records:
                continue
            kept = [record for record in records if record.owner != owner]
            if len(kept) != len(records):
                self._locks[fid] = kept
                self._wake(fid)

    def _carve(self, fileid: int, owner: Hashable, start: float, end: float) -> bool:
        """Remove ``owner``'s locks in [start, end), splitting partly covered ones."""
        records = self._locks.get(fileid)
        if not records:
            return False
        kept: list[LockRecord] = []
        changed = False
        for record in records:
            if record.owner != owner or record.end <= start or end <= record.start:
                kept.append(record)
                continue
            changed = True
            if record.start < start:
                kept.append(LockRecord(owner, record.start, start, record.exclusive))
            if end < record.end:
                kept.append(LockRecord(owner, end, record.end, record.exclusive))
        self._locks[fileid] = kept
        return changed

    def _wake(self, fileid: int) -> None:
        for process in self._waiters.pop(fileid, []):
            self._scheduler.wake(process)
