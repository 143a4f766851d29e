"""The POSIX syscall layer of one simulated process, over its host's NFS client.

Every call here is one syscall: it resolves paths under the export, lets the
fault plan act, performs its effect through the host's ``NfsClient`` (the
only place NFS semantics live), records one trace event with the RPCs it
sent, and then yields to the scheduler.  The patched ``os``, ``io`` and
``fcntl`` functions of ``simfs._patch`` are thin routes to these methods.
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from . import _client as nfs
from ._clock import NS_PER_S, seconds_to_ns
from ._dirent import SimDirEntry, SimScandirIterator, stat_result
from ._errors import SimulationEscape, errno_name, simulated_oserror
from ._files import OpenFile, allocate_fd, lookup_fd
from ._locks import INFINITY
from ._server import EXPORT_DEV, Attrs

if TYPE_CHECKING:
    from ._scheduler import Process
    from ._world import Host, World

T = TypeVar("T")
PathArg = str | bytes | os.PathLike[str] | os.PathLike[bytes]

_UMASK = 0o022
_TMPFILE = getattr(os, "O_TMPFILE", 0)


def _describe(result: object) -> str:
    """The outcome column of the trace for a successful call."""
    if result is None:
        return "ok"
    if isinstance(result, bool | int):
        return str(result)
    if isinstance(result, bytes):
        return f"{len(result)}B"
    if isinstance(result, os.stat_result):
        return "dir" if result.st_mode & 0o040000 else f"file {result.st_size}B"
    if isinstance(result, list):
        return f"{len(result)} entries"
    return "ok"


class Syscalls:
    """The syscalls of one simulated process (threads share their process's fds)."""

    def __init__(self, world: World, host: Host, process: Process) -> None:
        self._world = world
        self._host = host
        self._process = process
        self._client = host.client
        self._scheduler = world.scheduler
        self._clock = world.clock
        self._fds: dict[int, OpenFile] = process.group.fds
        self._group = process.group
        self._export = world.export
        self._prefix = world.export + "/"
        # Absolute path as written -> (normalized, components); only absolute
        # str paths are stored, so a hit never depends on the working directory.
        self._resolved: dict[str | bytes, tuple[str, tuple[str, ...]]] = {}

    # -- the shape of every call ---------------------------------------------

    def _run(self, op: str, shown: str, effect: Callable[[], T]) -> T:
        process = self._process
        if process.kill is not None:
            raise process.kill
        process.last_call = (op, shown)
        client = self._client
        client.call_rpcs = []
        try:
            faults = self._world.faults
            if faults is not None:
                self._inject(faults.for_call(op, self._host.name, shown, self._clock.now))
            result = effect()
        except OSError as error:
            if error.filename is None and shown:
                error.filename = shown
            outcome = errno_name(error.errno) if error.errno is not None else type(error).__name__
            if getattr(error, "simfs_injected", False):
                outcome += " (injected)"
            self._finish(op, shown, outcome)
            raise
        self._finish(op, shown, _describe(result))
        return result

    def _inject(self, rule: object) -> None:
        if rule is None:
            return
        from ._faults import FaultRule

        assert isinstance(rule, FaultRule)
        if rule.delay:
            self._scheduler.sleep(round(rule.delay * NS_PER_S))
        if rule.errno is not None:
            error = simulated_oserror(rule.errno)
            error.simfs_injected = True  # type: ignore[attr-defined]
            raise error

    def _finish(self, op: str, shown: str, outcome: str) -> None:
        rpcs = tuple(self._client.call_rpcs)
        self._world.trace.record(self._clock.now_ns, self._host.name, self._process.name, op,
                                 shown, outcome, rpcs)
        latency = self._world.rpc_latency_ns
        if rpcs and latency:
            self._scheduler.sleep(len(rpcs) * latency)
        else:
            self._scheduler.yield_now()

    def escape(self, what: str) -> SimulationEscape:
        """Record and return the error for code that reached outside the world."""
        error = SimulationEscape(self._process.name, self._host.name, what)
        self._world.escapes.append(error)
        return error

    def sleep(self, seconds: float) -> None:
        """time.sleep: a yield point that lets virtual time pass."""
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        process = self._process
        if process.kill is not None:
            raise process.kill
        process.last_call = ("sleep", f"{seconds:g}")
        self._world.trace.record(self._clock.now_ns, self._host.name, process.name, "sleep", "",
                                 f"{seconds:g}s")
        self._scheduler.sleep(seconds_to_ns(seconds, "sleep length"))

    # -- paths ------------------------------------------------------------------

    def _path(self, path: PathArg, dir_fd: int | None = None) -> tuple[str, int, list[str]]:
        """(path as shown, start file id, components under it)."""
        text = os.fspath(path)
        if dir_fd is None:
            known = self._resolved.get(text)
            if known is not None:
                return known[0], self._client.root, list(known[1])
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        if not text:
            raise simulated_oserror(errno.ENOENT, text)
        if dir_fd is not None and not text.startswith("/"):
            base = lookup_fd(self._fds, dir_fd)
            if not base.is_dir:
                raise simulated_oserror(errno.ENOTDIR, base.path)
            text = base.path + "/" + text
        elif not text.startswith("/"):
            text = self._group.cwd + "/" + text
        written = text
        text = posixpath.normpath(text)
        if text == self._export:
            components: list[str] = []
        elif text.startswith(self._prefix):
            components = text[len(self._prefix):].split("/")
        else:
            raise self.escape(f"path {text!r} is outside the export {self._export!r}")
        if dir_fd is None and written.startswith("/") and len(self._resolved) < 4096:
            # Absolute paths resolve the same way every time: pollers repeat them.
            self._resolved[written] = (text, tuple(components))
        return text, self._client.root, components

    def _parent(self, start: int, components: list[str], root_errno: int) -> tuple[int, str]:
        if not components:
            raise simulated_oserror(root_errno)
        parent = self._client.walk(start, components[:-1])
        if not parent.is_dir:
            raise simulated_oserror(errno.ENOTDIR)
        self._client._check_access(parent)
        return parent.fileid, components[-1]

    def _open_target(self, start: int, components: list[str]) -> Attrs:
        """The object a path names, looked up with an open intent (close-to-open)."""
        if not components:
            return self._client.getattr(start, force=self._client.options.cto)
        parent, name = self._parent(start, components, errno.EBUSY)
        return self._client.lookup(parent, name, nfs.OPEN)

    def _file(self, fd: int) -> OpenFile:
        return lookup_fd(self._fds, fd)

    def owns_fd(self, fd: int) -> bool:
        return fd in self._fds

    def _stat(self, attrs: Attrs) -> os.stat_result:
        return stat_result(attrs, EXPORT_DEV)

    # -- metadata ---------------------------------------------------------------

    def stat(self, path: PathArg | int, *, dir_fd: int | None = None,
             follow_symlinks: bool = True) -> os.stat_result:
        if isinstance(path, int):
            return self.fstat(path)
        shown, start, components = self._path(path, dir_fd)

        def effect() -> os.stat_result:
            attrs = self._client.walk(start, components)
            if not attrs.is_dir and self._client.pages.get(attrs.fileid) is not None:
                # nfs_getattr flushes dirty pages first so size and mtime are right.
                self._client.flush(attrs.fileid)
                attrs = self._client.getattr(attrs.fileid)
            return self._stat(attrs)

        return self._run("stat", shown, effect)

    def fstat(self, fd: int) -> os.stat_result:
        open_file = self._file(fd)

        def effect() -> os.stat_result:
            self._client.flush(open_file.fileid)
            return self._stat(self._client.getattr(open_file.fileid))

        return self._run("fstat", open_file.path, effect)

    def access(self, path: PathArg, mode: int, *, dir_fd: int | None = None,
               effective_ids: bool = False, follow_symlinks: bool = True) -> bool:
        shown, start, components = self._path(path, dir_fd)

        def effect() -> bool:
            try:
                self._client.walk(start, components)
            except FileNotFoundError:
                return False
            return True

        return self._run("access", shown, effect)

    def utime(self, path: PathArg | int, times: tuple[float, float] | None = None, *,
              ns: tuple[int, int] | None = None, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        if times is not None and ns is not None:
            raise ValueError("utime: you may specify either 'times' or 'ns' but not both")
        if ns is None:
            if times is None:
                now = self._world.epoch_ns + self._clock.now_ns
                ns = (now, now)
            else:
                ns = (round(times[0] * NS_PER_S), round(times[1] * NS_PER_S))
        atime_ns, mtime_ns = ns
        shown, target = self._target(path, dir_fd)
        self._run("utime", shown, lambda: self._set(target(), atime_ns=atime_ns,
                                                    mtime_ns=mtime_ns))

    def chmod(self, path: PathArg | int, mode: int, *, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        shown, target = self._target(path, dir_fd)
        self._run("chmod", shown, lambda: self._set(target(), mode=mode))

    def truncate(self, path: PathArg | int, length: int) -> None:
        if isinstance(path, int):
            self.ftruncate(path, length)
            return
        shown, target = self._target(path, None)
        self._run("truncate", shown, lambda: self._set(target(), size=length))

    def _target(self, path: PathArg | int, dir_fd: int | None) -> tuple[str, Callable[[], int]]:
        """(shown path, a function resolving the file id) for fd-or-path calls."""
        if isinstance(path, int):
            open_file = self._file(path)
            return open_file.path, lambda: open_file.fileid
        shown, start, components = self._path(path, dir_fd)
        return shown, lambda: self._client.walk(start, components).fileid

    def _set(self, fileid: int, **changes: int) -> None:
        if self._client.options.readonly:
            raise simulated_oserror(errno.EROFS)
        if changes.get("size", 0) < 0:
            raise simulated_oserror(errno.EINVAL)
        self._client.setattr(fileid, **changes)

    # -- directories ------------------------------------------------------------

    def listdir(self, path: PathArg | int = ".") -> list[str]:
        return [name for name, _ in self._listing("listdir", path)[1]]

    def scandir(self, path: PathArg | int = ".") -> SimScandirIterator:
        base, listing = self._listing("scandir", path)
        if isinstance(path, int):
            dir_fd = path
            return SimScandirIterator([
                SimDirEntry(name, name, attrs, lambda p: self.stat(p, dir_fd=dir_fd))
                for name, attrs in listing])
        return SimScandirIterator([
            SimDirEntry(name, posixpath.join(base, name), attrs, self.stat)
            for name, attrs in listing])

    def _listing(self, op: str, path: PathArg | int) -> tuple[str, list[tuple[str, Attrs]]]:
        """(path as the caller wrote it, entries) for listdir and scandir."""
        if isinstance(path, int):
            open_file = self._file(path)
            return "", self._run(op, open_file.path,
                                 lambda: self._client.readdir(open_file.fileid, revalidate=False))
        written = os.fspath(path)
        if isinstance(written, bytes):
            written = os.fsdecode(written)
        shown, start, components = self._path(path)

        def effect() -> list[tuple[str, Attrs]]:
            attrs = self._open_target(start, components)
            return self._client.readdir(attrs.fileid, revalidate=False)

        return written, self._run(op, shown, effect)

    def mkdir(self, path: PathArg, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        shown, start, components = self._path(path, dir_fd)

        def effect() -> None:
            self._writable_mount()
            parent, name = self._parent(start, components, errno.EEXIST)
            self._client.mkdir(parent, name, mode & ~_UMASK)

        self._run("mkdir", shown, effect)

    def rmdir(self, path: PathArg, *, dir_fd: int | None = None) -> None:
        shown, start, components = self._path(path, dir_fd)

        def effect() -> None:
            self._writable_mount()
            parent, name = self._parent(start, components, errno.EBUSY)
            self._client.rmdir(parent, name)

        self._run("rmdir", shown, effect)

    def unlink(self, path: PathArg, *, dir_fd: int | None = None) -> None:
        shown, start, components = self._path(path, dir_fd)

        def effect() -> None:
            self._writable_mount()
            parent, name = self._parent(start, components, errno.EISDIR)
            self._client.unlink(parent, name)

        self._run("unlink", shown, effect)

    def rename(self, source: PathArg, target: PathArg, *, src_dir_fd: int | None = None,
               dst_dir_fd: int | None = None) -> None:
        source_shown, source_start, source_parts = self._path(source, src_dir_fd)
        target_shown, target_start, target_parts = self._path(target, dst_dir_fd)

        def effect() -> None:
            self._writable_mount()
            from_dir, from_name = self._parent(source_start, source_parts, errno.EBUSY)
            to_dir, to_name = self._parent(target_start, target_parts, errno.EBUSY)
            self._client.rename(from_dir, from_name, to_dir, to_name)

        self._run("rename", f"{source_shown} -> {target_shown}", effect)

    def link(self, source: PathArg, target: PathArg, *, src_dir_fd: int | None = None,
             dst_dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
        source_shown, source_start, source_parts = self._path(source, src_dir_fd)
        target_shown, target_start, target_parts = self._path(target, dst_dir_fd)

        def effect() -> None:
            self._writable_mount()
            fileid = self._client.walk(source_start, source_parts).fileid
            to_dir, to_name = self._parent(target_start, target_parts, errno.EEXIST)
            self._client.link(fileid, to_dir, to_name)

        self._run("link", f"{source_shown} -> {target_shown}", effect)

    def readlink(self, path: PathArg, *, dir_fd: int | None = None) -> str:
        shown, start, components = self._path(path, dir_fd)

        def effect() -> str:
            self._client.walk(start, components)
            raise simulated_oserror(errno.EINVAL)  # the model has no symlinks

        return self._run("readlink", shown, effect)

    def chdir(self, path: PathArg) -> None:
        shown, start, components = self._path(path)

        def effect() -> None:
            if not self._client.walk(start, components).is_dir:
                raise simulated_oserror(errno.ENOTDIR)
            self._group.cwd = shown

        self._run("chdir", shown, effect)

    def getcwd(self) -> str:
        return self._group.cwd

    def _writable_mount(self) -> None:
        if self._client.options.readonly:
            raise simulated_oserror(errno.EROFS)

    # -- open and close ---------------------------------------------------------

    def open(self, path: PathArg, flags: int, mode: int = 0o777, *,
             dir_fd: int | None = None) -> int:
        shown, start, components = self._path(path, dir_fd)
        return self._run("open", shown, lambda: self._open(shown, start, components, flags,
                                                          mode))

    def _open(self, shown: str, start: int, components: list[str], flags: int,
              mode: int) -> int:
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
        if not components:
            attrs = client.getattr(start, force=client.options.cto)
        else:
            parent, name = self._parent(start, components, errno.EISDIR)
            if flags & os.O_CREAT:
                attrs, created = client.create(parent, name, exclusive=bool(flags & os.O_EXCL),
                                               mode=mode & ~_UMASK)
            else:
                attrs = client.lookup(parent, name, nfs.OPEN)
        if attrs.is_dir:
            if writable or flags & (os.O_CREAT | os.O_TRUNC):
                raise simulated_oserror(errno.EISDIR)
        elif flags & os.O_DIRECTORY:
            raise simulated_oserror(errno.ENOTDIR)
        if flags & os.O_TRUNC and writable and not created:
            client.setattr(attrs.fileid, size=0)
        client.open_file(attrs, created=created)
        open_file = OpenFile(attrs.fileid, shown, readable=readable, writable=writable,
                             append=bool(flags & os.O_APPEND),
                             sync=bool(flags & (os.O_SYNC | os.O_DSYNC)) or client.options.noac,
                             is_dir=attrs.is_dir, ofd_id=self._world.next_ofd_id())
        return allocate_fd(self._fds, open_file)

    def close(self, fd: int) -> None:
        open_file = self._file(fd)
        del self._fds[fd]
        open_file.refs -= 1
        self._run("close", open_file.path, lambda: self._close(open_file))

    def _close(self, open_file: OpenFile) -> None:
        locks = self._world.locks
        # Closing any descriptor drops the process's POSIX locks on the file.
        locks.release_owner(self._posix_owner(), open_file.fileid)
        if open_file.refs > 0:
            return
        locks.release_owner(("flock", open_file.ofd_id))
        faults = self._world.faults
        delay = 0.0 if faults is None else faults.close_delay(self._host.name, open_file.path)
        if delay:
            self._scheduler.call_at(self._clock.now_ns + round(delay * NS_PER_S),
                                    lambda: self._world.delayed_close(self._host, self._process,
                                                                      open_file))
            return
        release_file(self._host, open_file)

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
        self._world.locks.release_owner(self._posix_owner(), open_file.fileid)
        if open_file.refs == 0:
            self._world.locks.release_owner(("flock", open_file.ofd_id))
            try:
                release_file(self._host, open_file)
            except OSError:
                pass

    def close_all(self) -> int:
        """Process exit: the kernel closes every descriptor (no trace, no yield)."""
        count = 0
        for fd in sorted(self._fds):
            open_file = self._fds.pop(fd)
            open_file.refs -= 1
            if open_file.refs == 0:
                self._world.locks.release_owner(("flock", open_file.ofd_id))
                try:
                    release_file(self._host, open_file)
                except OSError:
                    pass
            count += 1
        self._world.locks.release_owner(self._posix_owner())
        return count

    # -- data -------------------------------------------------------------------

    def read(self, fd: int, length: int) -> bytes:
        open_file = self._file(fd)
        return self._run("read", open_file.path, lambda: self._read(open_file, length, None))

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        open_file = self._file(fd)
        return self._run("read", open_file.path, lambda: self._read(open_file, length, offset))

    def readinto(self, fd: int, buffer: memoryview) -> int:
        open_file = self._file(fd)

        def effect() -> int:
            data = self._read(open_file, len(buffer), None)
            buffer[:len(data)] = data
            return len(data)

        return self._run("read", open_file.path, effect)

    def _read(self, open_file: OpenFile, length: int, offset: int | None) -> bytes:
        if not open_file.readable:
            raise simulated_oserror(errno.EBADF)
        if open_file.is_dir:
            raise simulated_oserror(errno.EISDIR)
        if length < 0:
            raise simulated_oserror(errno.EINVAL)
        pages = self._client.read_pages(open_file.fileid)
        start = open_file.pos if offset is None else offset
        data = bytes(pages.data[start:start + length])
        if offset is None:
            open_file.pos = start + len(data)
        return data

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        open_file = self._file(fd)
        return self._run("write", open_file.path, lambda: self._write(open_file, data, None))

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:
        open_file = self._file(fd)
        return self._run("write", open_file.path, lambda: self._write(open_file, data, offset))

    def _write(self, open_file: OpenFile, data: bytes | bytearray | memoryview,
               offset: int | None) -> int:
        if not open_file.writable:
            raise simulated_oserror(errno.EBADF)
        payload = memoryview(data).cast("B")
        pages = self._client.write_pages(open_file.fileid)
        if offset is not None:
            start = offset
        else:
            start = len(pages.data) if open_file.append else open_file.pos
        if start > len(pages.data):
            pages.data.extend(b"\0" * (start - len(pages.data)))
        pages.data[start:start + len(payload)] = payload
        if offset is None:
            open_file.pos = start + len(payload)
        if open_file.sync:
            self._client.flush(open_file.fileid)
        return len(payload)

    def lseek(self, fd: int, position: int, how: int) -> int:
        """Moves the offset; sends no RPC unless SEEK_END needs the size."""
        open_file = self._file(fd)
        if how == os.SEEK_SET:
            base = 0
        elif how == os.SEEK_CUR:
            base = open_file.pos
        elif how == os.SEEK_END:
            pages = self._client.pages.get(open_file.fileid)
            base = (len(pages.data) if pages is not None
                    else self._client.getattr(open_file.fileid).size)
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

    # -- locks ------------------------------------------------------------------

    def _posix_owner(self) -> tuple[str, str, int]:
        return ("posix", self._host.name, self._group.pid)

    def flock(self, fd: int, operation: int) -> None:
        """flock(2), which Linux NFS sends to the server as a whole-file lock."""
        open_file = self._file(fd)
        owner = ("flock", open_file.ofd_id)

        def effect() -> None:
            kind = operation & ~_LOCK_NB
            if kind == _LOCK_UN:
                self._world.locks.unlock(open_file.fileid, owner)
                return
            if kind not in (_LOCK_SH, _LOCK_EX):
                raise simulated_oserror(errno.EINVAL)
            self._world.locks.lock(open_file.fileid, owner, 0, INFINITY,
                                   exclusive=kind == _LOCK_EX,
                                   wait=not operation & _LOCK_NB, what=open_file.path)

        self._run("flock", open_file.path, effect)

    def lockf(self, fd: int, command: int, length: int = 0, start: int = 0,
              whence: int = 0) -> None:
        """fcntl.lockf: POSIX record locks owned by the process (NLM on NFS)."""
        open_file = self._file(fd)

        def effect() -> None:
            if whence == os.SEEK_SET:
                base = 0
            elif whence == os.SEEK_CUR:
                base = open_file.pos
            else:
                base = self._client.getattr(open_file.fileid).size
            first = base + start
            end = INFINITY if length == 0 else first + length
            if length < 0:
                first, end = first + length, first
            if first < 0:
                raise simulated_oserror(errno.EINVAL)
            kind = command & ~_LOCK_NB
            locks = self._world.locks
            if kind == _LOCK_UN:
                locks.unlock(open_file.fileid, self._posix_owner(), first, end)
                return
            if kind not in (_LOCK_SH, _LOCK_EX):
                raise simulated_oserror(errno.EINVAL)
            # fcntl(2): a read lock needs a readable descriptor, a write lock a
            # writable one.
            if (open_file.writable if kind == _LOCK_EX else open_file.readable) is False:
                raise simulated_oserror(errno.EBADF)
            locks.lock(open_file.fileid, self._posix_owner(), first, end,
                       exclusive=kind == _LOCK_EX, wait=not command & _LOCK_NB,
                       what=open_file.path)

        self._run("lockf", open_file.path, effect)


_LOCK_SH, _LOCK_EX, _LOCK_NB, _LOCK_UN = 1, 2, 4, 8


def release_file(host: Host, open_file: OpenFile) -> None:
    """The end of a close: flush written data, then release the open."""
    client = host.client
    try:
        if open_file.writable:
            client.flush(open_file.fileid)
    finally:
        client.release(open_file.fileid)
