"""Byte-range locks as the NFSv3 server's lock manager (NLM) keeps them.

Linux NFS emulates ``flock()`` with whole-file POSIX locks sent over NLM
(nfs(5), ``local_lock=none``, the default), so flock and lockf locks
conflict with each other, across hosts and within one.  Owners differ:
a flock lock belongs to the open file description, a POSIX lock to the
process, which is why closing *any* descriptor of a file drops the
process's POSIX locks on it.

A lock can instead be local to its host: under ``nolock`` every lock, under
``local_lock=flock|posix|all`` the named kind (nfs(5); fs/nfs/file.c
``nfs_flock``/``nfs_lock`` call ``locks_lock_file_wait`` on the host's own
inode instead of NLM).  A local lock excludes only other owners on the same
host taking the same kind (the kernel keeps flock and POSIX locks in
separate lists, ``flc_flock`` and ``flc_posix``); the server never hears of
it, so no other host waits for it.  Measured in the VM on Linux 6.1
(docs/nfs-facts.md, "Lock modes").

A waiter blocked on another host's lock is granted some time after the
release, set by the waiter's kernel profile (``_kernels.py``): the NLM
GRANTED callback on Linux 6.1 (6-40 ms, measured), the client's own next
retry on 6.12.117, on a 30 s timer counted from the block (measured; the
server drops the queued request).  Over NFSv4.1 and 4.2 there is no NLM:
locks are LOCK operations on the server's v4 state, with the same conflicts,
and a waiter is woken by the server's CB_NOTIFY_LOCK at the release
(measured on 6.1: 0.04-0.24 s after it, docs/nfs-facts.md, "NFSv4.1 and 4.2").
"""

from __future__ import annotations

import errno
import math
from collections.abc import Hashable
from typing import TYPE_CHECKING

from .._errors import SimfsError, simulated_oserror

if TYPE_CHECKING:
    from .._engine._scheduler import Process, Scheduler
    from ._kernels import KernelProfile

INFINITY = math.inf


class UnmodelledLease(SimfsError):
    """A lock request meets a lock an NFSv4 host held when it crashed.

    Over v4 a lock is state under the client's lease: knfsd gives it up
    once the crashed client's lease has expired (90 s after its last
    renewal by default; knfsd's "courteous server" keeps an expired
    client's state until a conflicting request arrives).  Until then the
    request is refused (non-blocking) or keeps waiting.  simfs does not
    model the lease (docs/nfs-facts.md, "NFSv4.1 and 4.2"), so a request
    that depends on it is refused by name instead of waiting forever or
    failing forever, as it would never do on Linux.
    """


class LockRecord:
    __slots__ = ("end", "exclusive", "host", "kind", "local", "owner", "start")

    def __init__(self, owner: Hashable, start: float, end: float, exclusive: bool,
                 host: str = "", local: str | None = None, kind: str = "posix") -> None:
        self.owner = owner
        self.start = start
        self.end = end
        self.exclusive = exclusive
        self.host = host
        # Why the lock stays on its host (MountOptions.local_lock_reason), or
        # None for a lock the server's NLM holds.
        self.local = local
        self.kind = kind

    def copy(self, start: float, end: float) -> LockRecord:
        return LockRecord(self.owner, start, end, self.exclusive, self.host, self.local,
                          self.kind)

    def stands_in_the_way(self, owner: Hashable, start: float, end: float, exclusive: bool,
                          host: str, local: bool, kind: str) -> bool:
        """Whether this lock blocks ``owner``'s request: another owner, an
        overlapping range, one of them exclusive, and both held where the
        other can see it: both at the server, or both local to one host and
        of one kind (flock or POSIX)."""
        if self.owner == owner or not (self.start < end and start < self.end):
            return False
        if not (exclusive or self.exclusive):
            return False
        if local or self.local is not None:
            return local and self.local is not None and self.host == host \
                and self.kind == kind
        return True


class LockTable:
    """All locks on the export, keyed by file id."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._locks: dict[int, list[LockRecord]] = {}
        self._waiters: dict[int, list[Process]] = {}
        # fileid -> host whose release last woke the file's waiters
        self._released_by: dict[int, str] = {}
        # NFSv4 hosts that crashed: their server-held locks end with a lease.
        self._leases_lapsing: set[str] = set()

    def holders(self, fileid: int) -> list[tuple[Hashable, float, float, bool]]:
        """(owner, start, end, exclusive) of every lock on a file, for tests and reports."""
        return [(r.owner, r.start, r.end, r.exclusive) for r in self._locks.get(fileid, [])]

    def describe(self, fileid: int) -> list[str]:
        """One line per lock on a file: who holds what, and where it is held."""
        lines = []
        for record in self._locks.get(fileid, ()):
            span = ("whole file" if record.start == 0 and record.end == INFINITY
                    else f"bytes {record.start:g} to {record.end:g}")
            mode = "exclusive" if record.exclusive else "shared"
            where = ("held by the server's lock manager (NLM): other hosts wait for it"
                     if record.local is None else f"held on {record.host} only ("
                     f"{record.local})")
            lines.append(f"{record.host}: {record.kind} {mode} lock, {span}, {where}")
        return lines

    def conflicts(self, fileid: int, owner: Hashable, start: float, end: float, *,
                  exclusive: bool, host: str = "", local: bool = False,
                  kind: str = "posix") -> bool:
        """Whether another owner's lock stands in the way (F_GETLK, NLM TEST)."""
        return self._conflict(fileid, owner, start, end, exclusive, host, local, kind)

    def _conflict(self, fileid: int, owner: Hashable, start: float, end: float,
                  exclusive: bool, host: str, local: bool, kind: str) -> bool:
        return any(record.stands_in_the_way(owner, start, end, exclusive, host, local, kind)
                   for record in self._locks.get(fileid, ()))

    def lease_lapses(self, host: str) -> None:
        """An NFSv4 host crashed: its server-held locks last only until its lease
        expires, which is not modelled (``UnmodelledLease``)."""
        self._leases_lapsing.add(host)
        for fileid, records in list(self._locks.items()):
            if any(record.host == host and record.local is None for record in records):
                self._wake(fileid)  # a waiter already blocked must hear it too

    def _check_lease(self, fileid: int, owner: Hashable, start: float, end: float,
                     exclusive: bool, host: str, local: bool, kind: str, what: str) -> None:
        for record in self._locks.get(fileid, ()):
            if (record.local is None and record.host in self._leases_lapsing
                    and record.stands_in_the_way(owner, start, end, exclusive, host, local,
                                                 kind)):
                raise UnmodelledLease(
                    f"host {host!r} asks for a lock on {what} that host {record.host!r} "
                    f"held when it crashed: over NFSv4 the server gives it up once "
                    f"{record.host!r}'s lease has expired (90 s after its last renewal by "
                    "default, at the first conflicting request after that), which simfs "
                    "does not model (docs/nfs-facts.md, 'NFSv4.1 and 4.2'); over v3 the "
                    "lock stays held until the host reboots, as simfs keeps it")

    def drop_local(self, host: str) -> None:
        """A crashed host's local locks go with its kernel (NLM locks stay)."""
        for fileid, records in list(self._locks.items()):
            kept = [r for r in records if r.local is None or r.host != host]
            if len(kept) != len(records):
                self._locks[fileid] = kept
                self._wake(fileid)

    def host_locks(self, fileid: int, host: str) -> str:
        """What ``host`` holds on a file, as ``nfs_can_extend_write`` asks it:
        "none", "whole-file write lock" (its first lock), or "byte-range or
        read locks"."""
        from ._pagecache import LOCKS_NONE, LOCKS_OTHER, LOCKS_WHOLE_WRITE

        records = self._locks.get(fileid)
        if not records:
            return LOCKS_NONE
        mine = [r for r in records if r.host == host]
        if not mine:
            return LOCKS_NONE
        first = mine[0]
        if first.exclusive and first.start == 0 and first.end == INFINITY:
            return LOCKS_WHOLE_WRITE
        return LOCKS_OTHER

    def lock(self, fileid: int, owner: Hashable, start: float, end: float, *,
             exclusive: bool, wait: bool, what: str, host: str = "",
             kernel: KernelProfile | None = None, local: str | None = None,
             kind: str = "posix") -> float:
        """Take (or convert to) a lock; wait for conflicting owners if ``wait``.

        ``local`` is why the lock stays on ``host`` (see ``LockRecord``), or
        None for a lock sent to the server.

        Returns the seconds the grant waited after another host's release:
        0 unless the waiter's ``kernel`` learns of releases by retrying
        (``KernelProfile.lock_retry_s``), when it is granted at its next
        retry, counted from when it first blocked.  A local lock is granted
        by its own kernel as soon as it is free.

        Raises:
            BlockingIOError: a conflicting lock is held and ``wait`` is false.
        """
        delayed = 0.0
        blocked_ns: int | None = None
        clock = self._scheduler.clock
        is_local = local is not None
        while self._conflict(fileid, owner, start, end, exclusive, host, is_local, kind):
            if self._leases_lapsing:
                self._check_lease(fileid, owner, start, end, exclusive, host, is_local, kind,
                                  what)
            if not wait:
                raise simulated_oserror(errno.EAGAIN)
            process = self._scheduler.checkpoint()
            if blocked_ns is None:
                blocked_ns = clock.now_ns
            self._waiters.setdefault(fileid, []).append(process)
            try:
                self._scheduler.block(f"lock on {what}")
            finally:
                waiters = self._waiters.get(fileid, [])
                if process in waiters:
                    waiters.remove(process)
            releaser = self._released_by.get(fileid, host)
            if (kernel is not None and kernel.lock_retry_s is not None and releaser != host
                    and not is_local):
                released_s = clock.now_ns / 1e9
                retry_s = kernel.lock_granted_at(blocked_ns / 1e9, released_s)
                wait_ns = max(0, round(retry_s * 1e9) - clock.now_ns)
                if wait_ns:
                    self._scheduler.sleep(wait_ns)
                delayed = wait_ns / 1e9
        self._carve(fileid, owner, start, end)
        self._locks.setdefault(fileid, []).append(LockRecord(owner, start, end, exclusive,
                                                             host, local, kind))
        return delayed

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
                self._released_by[fid] = next(r.host for r in records if r.owner == owner)
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
            self._released_by[fileid] = record.host
            if record.start < start:
                kept.append(record.copy(record.start, start))
            if end < record.end:
                kept.append(record.copy(end, record.end))
        self._locks[fileid] = kept
        return changed

    def _wake(self, fileid: int) -> None:
        for process in self._waiters.pop(fileid, []):
            self._scheduler.wake(process)
