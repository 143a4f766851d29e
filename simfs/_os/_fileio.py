"""The descriptor half of the syscall layer: open, close, read, write, locks.

``Syscalls`` (``_syscalls.py``) inherits these; they share its call shape
(``_run``: fault plan, effect through the host's NFS client, one trace event,
a yield) and its state, declared below for the type checker.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .._engine._clock import NS_PER_S
from .._errors import simulated_oserror
from .._nfs import _client as nfs
from .._nfs._locks import INFINITY
from ._files import DescriptorReads, OpenFile, allocate_fd, lookup_fd
from ._namei import PathWalk
from ._seam import PathArg as PathArg

if TYPE_CHECKING:
    from .._engine._clock import VirtualClock
    from .._engine._scheduler import Process, ProcessGroup, Scheduler
    from .._engine._trace import Trace
    from .._nfs._client import NfsClient
    from .._nfs._server import Attrs
    from ._context import SyscallHost, SyscallWorld

T = TypeVar("T")

_TMPFILE = getattr(os, "O_TMPFILE", 0)


class FileCalls(PathWalk, DescriptorReads[OpenFile]):
    """open/close/read/write/fsync/lseek/ftruncate/sendfile/dup and flock/lockf."""

    _world: SyscallWorld
    _host: SyscallHost
    _process: Process
    _client: NfsClient
    _scheduler: Scheduler
    _clock: VirtualClock
    _trace: Trace
    _fds: dict[int, OpenFile]
    _group: ProcessGroup
    _mount_ref: object

    def _run(self, op: str, shown: str, effect: Callable[[], T], path: object = None,
             path2: object = None) -> T:
        raise NotImplementedError

    def _set(self, target: Attrs | int, *, link_ok: bool = True, **changes: int) -> None:
        raise NotImplementedError

    def _file(self, fd: int) -> OpenFile:
        return lookup_fd(self._fds, fd)

    # -- open and close ---------------------------------------------------------

    def open(self, path: PathArg, flags: int, mode: int = 0o777, *,
             dir_fd: int | None = None) -> int:
        shown, start, components = self._path(path, dir_fd)
        return self._run("open", shown, lambda: self._open(shown, start, components, flags,
                                                          mode), path)

    def _open(self, shown: str, start: int, components: list[str], flags: int,
              mode: int) -> int:
        requested = flags  # F_GETFL shows what was asked, not the walk's adjustments
        access_mode = flags & os.O_ACCMODE
        if access_mode == os.O_ACCMODE:
            raise simulated_oserror(errno.EINVAL)
        readable = access_mode in (os.O_RDONLY, os.O_RDWR)
        writable = access_mode in (os.O_WRONLY, os.O_RDWR)
        if _TMPFILE and flags & _TMPFILE == _TMPFILE:
            raise simulated_oserror(errno.EOPNOTSUPP)  # NFSv3 has no O_TMPFILE
        if (writable or flags & (os.O_CREAT | os.O_TRUNC)) and self._client.options.readonly:
            raise simulated_oserror(errno.EROFS)
        client = self._client
        created = False
        must_be_dir = bool(components) and components[-1] in nfs.LAST_MARKERS
        if must_be_dir:
            if flags & os.O_CREAT:
                # open_last_lookups: a create of a name written with a trailing
                # slash is EISDIR, once the directory it would be made in is
                # found ("x/." walks x itself: ENOENT or ENOTDIR first).
                if components[-1] == nfs.LAST_DOT:
                    self._resolve(start, components)
                else:
                    self._parent(start, components[:-1], errno.EISDIR)
                raise simulated_oserror(errno.EISDIR)
            components = components[:-1]  # "x/": x, which must be a directory
            flags &= ~os.O_NOFOLLOW  # and whose link is followed (LOOKUP_FOLLOW)
        if not components:
            attrs = client.getattr(start, force=client.options.cto)
        else:
            walk = self._parent_walk(start, components, errno.EISDIR)
            while True:
                if walk.name is None:  # a link to a directory by "..": open it
                    attrs = client.getattr(walk.attrs.fileid, force=client.options.cto)
                    break
                if flags & os.O_CREAT:
                    attrs, created = client.create(
                        walk.attrs.fileid, walk.name, exclusive=bool(flags & os.O_EXCL),
                        mode=mode & ~self._group.umask)
                else:
                    attrs = client.lookup(walk.attrs.fileid, walk.name, nfs.OPEN)
                if not attrs.is_link:
                    break
                if flags & os.O_NOFOLLOW:
                    raise simulated_oserror(errno.ELOOP)  # open(2): O_NOFOLLOW on a link
                # Follow it; O_CREAT through a dangling link creates its target.
                self._enter_link(walk, attrs)
                self._to_last(walk)
        if must_be_dir and not attrs.is_dir:
            raise simulated_oserror(errno.ENOTDIR)
        if attrs.is_dir:
            if writable or flags & (os.O_CREAT | os.O_TRUNC):
                raise simulated_oserror(errno.EISDIR)
        elif flags & os.O_DIRECTORY:
            raise simulated_oserror(errno.ENOTDIR)
        if writable and not created and not attrs.is_dir and client.kernel.read_delegations:
            # NFSv4.x: an OPEN for write recalls other hosts' read delegations,
            # answered NFS4ERR_DELAY until they are back (simfs/_nfs/_delegations.py).
            client.recall(attrs.fileid, delay=True, opening=True)
        if flags & os.O_TRUNC and writable and not created:
            client.setattr(attrs.fileid, size=0)
        dentry = None if not components or walk.name is None else (walk.attrs.fileid, walk.name)
        pin = client.open_file(attrs, created=created, writable=writable, label=shown,
                               dentry=dentry, readable=readable)
        open_file = OpenFile(attrs.fileid, shown, readable=readable, writable=writable,
                             append=bool(flags & os.O_APPEND),
                             sync=(bool(flags & (os.O_SYNC | os.O_DSYNC)) or client.options.noac
                                   or client.options.sync),
                             is_dir=attrs.is_dir, ofd_id=self._world._next_ofd_id(),
                             flags=requested)
        open_file.pin = pin
        open_file.mount = self._mount_ref
        return allocate_fd(self._fds, open_file)

    def close(self, fd: int) -> None:
        open_file = self._file(fd)
        del self._fds[fd]
        open_file.refs -= 1
        self._run("close", open_file.path, lambda: self._close(open_file))

    def _close(self, open_file: OpenFile) -> None:
        locks = self._world._locks
        # Closing any descriptor drops the process's POSIX locks on the file.
        locks.release_owner(self._posix_owner(), open_file.fileid)
        if open_file.refs > 0:
            return
        locks.release_owner(("flock", open_file.ofd_id))
        faults = self._world._faults
        delay = 0.0 if faults is None else faults.close_delay(self._host.name, open_file.path)
        if delay:
            self._scheduler.call_at(self._clock.now_ns + round(delay * NS_PER_S),
                                    lambda: self._close_lands(open_file))
            return
        release_file(self._client, open_file)

    def _close_lands(self, open_file: OpenFile) -> None:
        """A close that a ``CloseDelay`` held back lands now.

        It is the client finishing the close on its own time (the removal
        windows of docs/design.md, "The NFS model"): its own trace event, with
        the RPCs it sent, none of them counted to whatever syscall is in
        progress.
        """
        if self._host.crashed:
            return  # a crashed host's open files stay open (.nfs orphans)
        outcome = "ok"
        with self._client.recording() as rpcs:
            try:
                release_file(self._client, open_file)
            except OSError as error:
                outcome = f"errno {error.errno}"
        self._trace.record(self._clock.now_ns, self._host.name, self._process._name,
                                 "close-landed", open_file.path, outcome, tuple(rpcs))

    def dup(self, fd: int) -> int:
        open_file = self._file(fd)
        open_file.refs += 1
        return allocate_fd(self._fds, open_file)

    def close_quietly(self, fd: int) -> None:
        """Close without a trace entry or a yield (a file object collected late)."""
        open_file = self._fds.pop(fd, None)
        if open_file is None:
            return
        open_file.refs -= 1
        self._world._locks.release_owner(self._posix_owner(), open_file.fileid)
        if open_file.refs == 0:
            self._world._locks.release_owner(("flock", open_file.ofd_id))
            try:
                release_file(self._client, open_file)
            except OSError:
                pass

    def close_all(self) -> int:
        """Process exit: the kernel closes every descriptor (no trace, no yield)."""
        descriptors = sorted(self._fds)
        for fd in descriptors:
            self.close_quietly(fd)
        self._world._locks.release_owner(self._posix_owner())
        return len(descriptors)

    # -- data -------------------------------------------------------------------

    # read, pread and readinto: DescriptorReads, over this _read.

    def _read(self, open_file: OpenFile, length: int, offset: int | None) -> bytes:
        if not open_file.readable:
            raise simulated_oserror(errno.EBADF)
        if open_file.is_dir:
            raise simulated_oserror(errno.EISDIR)
        if length < 0 or (offset is not None and offset < 0):
            raise simulated_oserror(errno.EINVAL)
        start = open_file.pos if offset is None else offset
        data = self._client.read_data(open_file.fileid, start, length)
        if offset is None:
            open_file.pos = start + len(data)
        return data

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        open_file = self._file(fd)
        return self._run("write", open_file.path, lambda: self._write(open_file, data, None))

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:
        if offset < 0:
            raise simulated_oserror(errno.EINVAL)  # ksys_pwrite64, before the descriptor
        open_file = self._file(fd)
        return self._run("write", open_file.path, lambda: self._write(open_file, data, offset))

    def _write(self, open_file: OpenFile, data: bytes | bytearray | memoryview,
               offset: int | None) -> int:
        if not open_file.writable:
            raise simulated_oserror(errno.EBADF)
        if offset is not None and offset < 0:
            raise simulated_oserror(errno.EINVAL)
        payload = memoryview(data).cast("B")
        client = self._client
        fileid = open_file.fileid
        if offset is not None and not open_file.append:
            start = offset
        elif open_file.append:
            # pwrite(2) BUGS: on Linux an O_APPEND descriptor appends whatever
            # the offset (generic_write_checks moves it to the end).
            # nfs_file_write: O_APPEND writes at the cached size, revalidated
            # only once the attributes expired (nfs_revalidate_file_size).
            # Two hosts appending overwrite each other's records (measured).
            start = client.revalidate_size(fileid)
        else:
            start = open_file.pos
        if payload:
            client.write_data(fileid, start, payload, readable=open_file.readable,
                              sync=open_file.sync,
                              locks=self._world._locks.host_locks(fileid, self._host.name))
        if offset is None:
            open_file.pos = start + len(payload)
        return len(payload)

    def lseek(self, fd: int, position: int, how: int) -> int:
        """Moves the offset; sends no RPC unless SEEK_END needs the size."""
        open_file = self._file(fd)
        if how == os.SEEK_SET:
            base = 0
        elif how == os.SEEK_CUR:
            base = open_file.pos
        elif how == os.SEEK_END:
            base = self._client.revalidate_size(open_file.fileid)
        else:
            raise simulated_oserror(errno.EINVAL)
        if base + position < 0:
            raise simulated_oserror(errno.EINVAL)
        open_file.pos = base + position
        return open_file.pos

    def fsync(self, fd: int) -> None:
        open_file = self._file(fd)
        self._run("fsync", open_file.path, lambda: self._client.flush(open_file.fileid))

    def ftruncate(self, fd: int, length: int) -> None:
        open_file = self._file(fd)

        def effect() -> None:
            if not open_file.writable:
                raise simulated_oserror(errno.EINVAL)
            self._set(open_file.fileid, size=length)

        self._run("ftruncate", open_file.path, effect)

    def sendfile(self, out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        source = self._file(in_fd)
        destination = self._file(out_fd)

        def effect() -> int:
            data = self._read(source, count, offset)
            return self._write(destination, data, None)

        return self._run("sendfile", f"{source.path} -> {destination.path}", effect)

    def copy_file_range(self, src: int, dst: int, count: int, offset_src: int | None = None,
                        offset_dst: int | None = None) -> int:
        """copy_file_range(2).  NFSv3 has no COPY, so the kernel copies through
        the page cache (``generic_copy_file_range``): a read and a write, as
        sendfile does; an offset given is used and left as it was, else the
        descriptor's own moves."""
        source = self._file(src)
        destination = self._file(dst)

        def effect() -> int:
            if destination.append:
                raise simulated_oserror(errno.EBADF)  # copy_file_range(2): O_APPEND out
            if source.fileid == destination.fileid:
                start = source.pos if offset_src is None else offset_src
                target = destination.pos if offset_dst is None else offset_dst
                if start < target + count and target < start + count:
                    raise simulated_oserror(errno.EINVAL)  # overlapping ranges of one file
            data = self._read(source, count, offset_src)
            return self._write(destination, data, offset_dst)

        return self._run("copy_file_range", f"{source.path} -> {destination.path}", effect)

    # -- locks ------------------------------------------------------------------

    def _granted(self, operation: int, delayed: float, local: str | None = None) -> str:
        """The trace's account of a grant, naming the kernel when it waited,
        and why the lock stays on this host when it is local."""
        if local is not None:
            return f"{_lock_name(operation)} granted on {self._host.name} only ({local})"
        if not delayed:
            return f"{_lock_name(operation)} granted"
        return (f"{_lock_name(operation)} granted {delayed:g} s after another host's release "
                f"(kernel {self._client.kernel.release})")

    def _posix_owner(self) -> tuple[str, str, int]:
        return ("posix", self._host.name, self._group.pid)

    def flock(self, fd: int, operation: int) -> None:
        """flock(2), which Linux NFS sends to the server as a whole-file lock."""
        open_file = self._file(fd)
        owner = ("flock", open_file.ofd_id)

        def effect() -> str:
            kind = operation & ~_LOCK_NB
            if kind == _LOCK_UN:
                self._world._locks.unlock(open_file.fileid, owner)
                return "LOCK_UN"
            if kind not in (_LOCK_SH, _LOCK_EX):
                raise simulated_oserror(errno.EINVAL)
            local = self._client.options.local_lock_reason("flock")
            delayed = self._world._locks.lock(
                open_file.fileid, owner, 0, INFINITY, exclusive=kind == _LOCK_EX,
                wait=not operation & _LOCK_NB, what=open_file.path, host=self._host.name,
                kernel=self._client.kernel, local=local, kind="flock")
            return self._granted(operation, delayed, local)

        self._run("flock", open_file.path, effect)

    def lockf(self, fd: int, command: int, length: int = 0, start: int = 0,
              whence: int = 0) -> None:
        """fcntl.lockf: POSIX record locks owned by the process (NLM on NFS)."""
        open_file = self._file(fd)

        def effect() -> str:
            first, end = self._lock_range(open_file, length, start, whence)
            kind = command & ~_LOCK_NB
            locks = self._world._locks
            if kind == _LOCK_UN:
                locks.unlock(open_file.fileid, self._posix_owner(), first, end)
                return "LOCK_UN"
            if kind not in (_LOCK_SH, _LOCK_EX):
                raise simulated_oserror(errno.EINVAL)
            # fcntl(2): a read lock needs a readable descriptor, a write lock a
            # writable one.
            if (open_file.writable if kind == _LOCK_EX else open_file.readable) is False:
                raise simulated_oserror(errno.EBADF)
            local = self._client.options.local_lock_reason("posix")
            delayed = locks.lock(open_file.fileid, self._posix_owner(), first, end,
                                 exclusive=kind == _LOCK_EX, wait=not command & _LOCK_NB,
                                 what=open_file.path, host=self._host.name,
                                 kernel=self._client.kernel, local=local)
            return self._granted(command, delayed, local)

        self._run("lockf", open_file.path, effect)


    def advise(self, fd: int, advice: int) -> None:
        """posix_fadvise with an access-pattern hint: nothing a program sees changes."""
        open_file = self._file(fd)
        self._run("posix_fadvise", open_file.path, lambda: advice)

    def held_fds(self) -> list[int]:
        """The simulated descriptors the process holds, lowest first."""
        return sorted(self._fds)

    def _lock_range(self, open_file: OpenFile, length: int, start: int,
                    whence: int) -> tuple[int, float]:
        """[first, end) of a POSIX lock: ``length`` bytes (0: to the end of
        the file and beyond; negative: before) from ``start`` after ``whence``."""
        if whence == os.SEEK_SET:
            base = 0
        elif whence == os.SEEK_CUR:
            base = open_file.pos
        else:
            base = self._client.getattr(open_file.fileid).size
        first = base + start
        end: float = INFINITY if length == 0 else first + length
        if length < 0:
            first, end = first + length, first
        if first < 0:
            raise simulated_oserror(errno.EINVAL)
        return first, end

    def lock_test(self, fd: int, length: int) -> bool:
        """os.lockf's F_TEST: whether another process holds a write lock on
        the ``length`` bytes from the offset (0: to the end), as glibc's
        lockf asks F_GETLK with a read lock."""
        open_file = self._file(fd)

        def effect() -> str:
            first, end = self._lock_range(open_file, length, 0, os.SEEK_CUR)
            local = self._client.options.local_lock_reason("posix") is not None
            locked = self._world._locks.conflicts(open_file.fileid, self._posix_owner(),
                                                 first, end, exclusive=False,
                                                 host=self._host.name, local=local)
            return "F_TEST: locked" if locked else "F_TEST: unlocked"

        return self._run("lockf", open_file.path, effect) == "F_TEST: locked"


_LOCK_SH, _LOCK_EX, _LOCK_NB, _LOCK_UN = 1, 2, 4, 8


def _lock_name(operation: int) -> str:
    """``LOCK_EX|LOCK_NB`` for the trace."""
    kind = {_LOCK_SH: "LOCK_SH", _LOCK_EX: "LOCK_EX"}.get(operation & ~_LOCK_NB, "LOCK_UN")
    return f"{kind}|LOCK_NB" if operation & _LOCK_NB else kind


def release_file(client: NfsClient, open_file: OpenFile) -> None:
    """The end of a close: flush written data, then release the open."""
    try:
        if open_file.writable:
            client.flush(open_file.fileid)
    finally:
        client.release(open_file.fileid, writable=open_file.writable, pin=open_file.pin)
