"""The machine's own files, outside every simulated mount: real, and read-only.

A program reads its installation as it runs: a package's data files
(``importlib.resources``), gettext catalogs (every ``argparse.ArgumentParser()``
stats them), ``/usr/share/zoneinfo``, ``/etc/ssl/certs``, ``/etc/hosts``, its
own source files.  None of that is the program's coordination through shared
storage, and refusing it refused programs that do no other real I/O (issue
24).  So a read of a path that is under no simulated mount (the export, a
host's local disks), and that the host does not answer itself (``/proc``,
``/dev``, ``/`` and the export's parents: ``_os/_proc.py``), is answered
from the real machine:

- ``stat``/``lstat``/``access``/``readlink``/``listdir``/``scandir``, ``chdir``
  into a real directory, and ``open`` read-only (a simulated descriptor over a
  real one, read with ``pread``) are real calls, made with routing off; each is
  one event in the trace (outcome marked ``(machine)``) and a yield, like any
  syscall.
- Anything that would change the machine (a write, create, remove, rename,
  link, chmod, chown, utime, truncate, lock) is a ``SimulationEscape`` naming
  the process, its host and the call; ``statvfs`` of the machine's disks too
  (their sizes differ per machine, and the local disks have their own).
- The machine's identity is refused, not read: ``/sys``, ``/run``,
  ``/etc/hostname``, ``/etc/machine-id``, ``/etc/passwd``, ``/etc/group`` and
  the shadow files name the real machine and its users, which the world
  answers itself (``socket.gethostname()``, ``pwd``, ``grp``); and ``/proc`` or
  ``/dev`` entries the host does not answer are not read from the real ones.

Determinism: a run must not depend on the machine changing under it.  The
first time a world sees a real path, it keeps the path's identity (device,
inode, type, and for a file its size and mtime); any later call on that path,
and every read of an open one, checks it, and a change fails the run loudly
(``SimulationEscape``) instead of letting the trace change silently.  A
directory keeps only device, inode and type: the import system writes
``__pycache__`` into package directories during runs.  The trace records sizes,
never mtimes, so the same files give the same trace on any machine.
"""

from __future__ import annotations

import errno
import functools
import os
import posixpath
import site
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._engine._scheduler import routing
from .._errors import SimulationEscape, errno_name, simulated_oserror
from ._dirent import SimDirEntry, SimScandirIterator
from ._files import DescriptorReads, OpenFile, allocate_fd, lookup_fd, status_flags
from ._namei import path_text

if TYPE_CHECKING:
    from .._engine._scheduler import Process
    from ._context import SyscallHost, SyscallWorld
    from ._seam import Buffer, PathArg

T = TypeVar("T")

# Paths that name the real machine or its users, or that the host answers
# itself (/proc, /dev): never read from the real machine.
_IDENTITY_TREES = ("/proc", "/dev", "/sys", "/run", "/var/run")
_IDENTITY_FILES = frozenset({
    "/etc/hostname", "/etc/machine-id", "/var/lib/dbus/machine-id", "/etc/passwd",
    "/etc/group", "/etc/shadow", "/etc/gshadow", "/etc/subuid", "/etc/subgid",
})
_NULL = "/dev/null"
_CHANGES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_TMPFILE = getattr(os, "O_TMPFILE", 0)
# Flags a read-only open may carry on to the real one.
_KEPT_FLAGS = (os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_NOATIME", 0)
               | getattr(os, "O_PATH", 0))


# The working directory of the test process when simfs was imported: the
# project, whose own files a program reads (its sources, test data).
_PROJECT = os.getcwd()


def installation_roots() -> tuple[str, ...]:
    """Where the interpreter, its packages and the program's own code are, each ending in "/".

    These stay the machine's even under a host's local tree: measured, this
    machine's interpreter is under /root/.pyenv, a user's site-packages
    under ~/.local is common, and a checkout under /tmp (CI clones there)
    holds the program's modules, which each process imports afresh.  The
    program's code is the project (the working directory when simfs was
    imported) and every directory on ``sys.path``, but a local disk's own
    mount point (a ``sys.path`` entry of "/tmp" would hide the host's /tmp).
    """
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return _roots(tuple(sys.path), os.path.abspath(main) if isinstance(main, str) else None)


@functools.cache
def _roots(path: tuple[str, ...], main: str | None) -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, _PROJECT}
    if main is not None:
        # The script itself, which may lie directly in /tmp: a root of one file
        # (every probe is a path + "/").
        roots.add(main)
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and user_site in path:
        roots.add(user_site)
    roots.update(entry for entry in path if entry.startswith("/"))
    # A program started from /tmp (its working directory, or a script there
    # on sys.path) must not hide the host's whole /tmp: only its subdirectories
    # can be the program's code.
    return tuple(sorted(root.rstrip("/") + "/" for root in roots
                        if root.rstrip("/") not in _NEVER_ROOTS))


# Directories that are a host's own local disk, never the program's code.
_NEVER_ROOTS = frozenset({"", "/tmp", "/var/tmp", "/root", "/home"})


@functools.cache
def _named_roots() -> tuple[tuple[str, str], ...]:
    """(root + "/", its name in the trace), longest first."""
    roots = {sys.base_prefix: "{base_prefix}", sys.base_exec_prefix: "{base_prefix}",
             sys.prefix: "{prefix}", sys.exec_prefix: "{prefix}", _PROJECT: "{project}"}
    pairs = {(root.rstrip("/") + "/", name) for root, name in roots.items() if root != "/"}
    return tuple(sorted(pairs, key=lambda pair: -len(pair[0])))


def portable(text: str) -> str:
    """``text`` as the trace shows it: under the interpreter's installation or
    the project, named by that root (``{prefix}/lib/...``), so that the same
    program reading the same files gives the same trace wherever Python and
    the checkout are installed."""
    for root, name in _named_roots():
        if text.startswith(root):
            return name + text[len(root) - 1:]
    return text


def is_identity(text: str) -> bool:
    """Whether a normalised absolute path names the real machine or its users."""
    return text in _IDENTITY_FILES or any(text == tree or text.startswith(tree + "/")
                                          for tree in _IDENTITY_TREES)


def machine_seen(world: object) -> dict[str, tuple[int, ...] | None]:
    """The identity of every real path the world has looked at (None: absent)."""
    seen: dict[str, tuple[int, ...] | None] = world.__dict__.setdefault("_machine_seen", {})
    return seen


def _identity(result: os.stat_result) -> tuple[int, ...]:
    mode = result.st_mode & 0o170000
    if mode == 0o040000:
        return (result.st_dev, result.st_ino, mode)
    return (result.st_dev, result.st_ino, mode, result.st_size, result.st_mtime_ns)


class MachineFile(OpenFile):
    """An open real file, read through its real descriptor (``real_fd``)."""

    __slots__ = ("identity", "real_fd")

    def __init__(self, real_fd: int, path: str, identity: tuple[int, ...], is_dir: bool,
                 ofd_id: int) -> None:
        super().__init__(-1, path, readable=True, writable=False, append=False, sync=False,
                         is_dir=is_dir, ofd_id=ofd_id)
        self.real_fd = real_fd
        self.identity = identity
        self.mount: Any = None  # MachineFiles.open sets it: its calls go there


def _outcome(result: object) -> str:
    if isinstance(result, os.stat_result):
        mode = result.st_mode & 0o170000
        kind = {0o040000: "dir", 0o120000: "link"}.get(mode)
        shown = kind or f"file {result.st_size}B"
        return f"{shown} (machine)"
    if isinstance(result, bytes):
        return f"{len(result)}B (machine)"
    if isinstance(result, list):
        return f"{len(result)} entries (machine)"
    if isinstance(result, bool | int):
        return f"{result} (machine)"
    return "ok (machine)"


class MachineFiles(DescriptorReads[MachineFile]):
    """One process's read-only view of the real machine's files."""

    def __init__(self, world: SyscallWorld, host: SyscallHost, process: Process,
                 mounts: Callable[[], str]) -> None:
        self._world = world
        self._host = host
        self._process = process
        self._group = process.group
        self._fds: dict[int, OpenFile] = process.group.fds
        # Names the simulated mounts, for the message of a refused change.
        self._mounts = mounts
        self._seen = machine_seen(world)

    # -- the shape of every call ---------------------------------------------------

    def _real(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function`` with routing off: the original reaches the real machine."""
        process = getattr(routing, "process", None)
        routing.process = None
        try:
            return function(*args, **kwargs)
        finally:
            routing.process = process

    def _event(self, op: str, shown: str, outcome: str) -> None:
        process = self._process
        shown = portable(shown)
        process._last_call = (op, shown)
        self._world.trace.record(self._world._clock.now_ns, self._host.name, process.name,
                                 op, shown, outcome)
        self._world._scheduler.yield_running(process)

    def _run(self, op: str, shown: str, effect: Callable[[], T], path: object = None) -> T:
        process = self._process
        if process.kill is not None:
            raise process.kill
        try:
            result = effect()
        except OSError as error:
            if error.filename is None and path is not None:
                error.filename = os.fspath(path)  # type: ignore[call-overload]
            name = errno_name(error.errno) if error.errno is not None else type(error).__name__
            self._event(op, shown, f"{name} (machine)")
            raise
        self._event(op, shown, _outcome(result))
        return result

    def escape(self, what: str) -> SimulationEscape:
        error = SimulationEscape(self._process.name, self._host.name, what)
        self._world._escapes.append(error)
        return error

    def _refuse_change(self, call: str, path: object) -> SimulationEscape:
        return self.escape(f"{call}({path!r}) would change the real machine: "
                           + self._why_read_only(path))

    def _why_read_only(self, path: object) -> str:
        """Why a write to ``path`` meets the machine's read-only files, in words
        that hold for it: a path under a local disk's mount point is the
        machine's only when it is in the program's own installation."""
        try:
            text = os.fsdecode(os.fspath(path))  # type: ignore[call-overload]
        except TypeError:
            text = ""
        probe = posixpath.normpath(text) + "/" if text.startswith("/") else ""
        root = next((root for root in installation_roots() if probe.startswith(root)), None)
        if root is not None and root != "/":
            return (f"{root.rstrip('/')} holds the program's own code (the interpreter, a "
                    "sys.path entry or the working directory simfs was imported from), which "
                    "every host reads from the real machine, read-only, even under a simulated "
                    f"mount ({self._mounts()}); write elsewhere")
        return (f"outside the simulated mounts ({self._mounts()}) the machine's files are "
                "read-only; write under one of them")

    def _checked(self, text: str, found: os.stat_result | None) -> None:
        """Refuse a real path whose identity changed since the world first saw it."""
        now = None if found is None else _identity(found)
        if text not in self._seen:
            self._seen[text] = now
            return
        before = self._seen[text]
        if before != now:
            raise self.escape(
                f"the real file {text!r} changed during the run (first seen as "
                f"{_shown_identity(before)}, now {_shown_identity(now)}): the machine's "
                "files must stay as they were while a world reads them, or the run would "
                "not be repeatable")

    def _lookup(self, text: str) -> None:
        """Check ``text``'s identity (following links), as the world first saw it."""
        try:
            found: os.stat_result | None = self._real(os.stat, text)
        except OSError:
            found = None
        self._checked(text, found)

    # -- paths ----------------------------------------------------------------------

    def absolute(self, path: PathArg, dir_fd: int | None = None) -> str:
        """``path`` as an absolute, normalised text path (relative: from the cwd)."""
        text = path_text(os.fspath(path))
        if not text.startswith("/"):
            base = self._group.cwd if dir_fd is None else lookup_fd(self._fds, dir_fd).path
            text = base + "/" + text
        return posixpath.normpath(text)

    def _readable(self, call: str, path: PathArg, dir_fd: int | None = None) -> str:
        text = self.absolute(path, dir_fd)
        if is_identity(text):
            raise self.escape(
                f"{call}({os.fspath(path)!r}): this path names the real machine or its "
                "users, which a simulated host does not read (the world answers "
                "socket.gethostname(), pwd, grp and its own /proc and /dev entries)")
        return text

    def stat(self, path: PathArg | int, *, dir_fd: int | None = None,
             follow_symlinks: bool = True) -> os.stat_result:
        if isinstance(path, int):
            return self.fstat(path)
        text = self._readable("os.stat", path, dir_fd)
        self._lookup(text)
        return self._run("stat" if follow_symlinks else "lstat", text,
                          lambda: self._real(os.stat, text, follow_symlinks=follow_symlinks),
                          path)

    def access(self, path: PathArg, mode: int, *, dir_fd: int | None = None,
               effective_ids: bool = False, follow_symlinks: bool = True) -> bool:
        text = self._readable("os.access", path, dir_fd)
        self._lookup(text)
        # W_OK is False, as on a read-only mount: nothing outside the
        # simulated mounts may be written (the answer a program that looks
        # for a writable directory needs to move on to one).
        return self._run("access", text, lambda: not mode & os.W_OK and self._real(
            os.access, text, mode, follow_symlinks=follow_symlinks), path)

    def readlink(self, path: PathArg, *, dir_fd: int | None = None) -> str | bytes:
        text = self._readable("os.readlink", path, dir_fd)
        self._lookup(text)
        target: str = self._run("readlink", text, lambda: self._real(os.readlink, text), path)
        return os.fsencode(target) if isinstance(os.fspath(path), bytes) else target

    def listdir(self, path: PathArg | int = ".") -> list[str] | list[bytes]:
        if isinstance(path, int):
            path = self._file(path).path
        text = self._readable("os.listdir", path)
        self._lookup(text)
        names: list[str] = self._run("listdir", text, lambda: self._real(os.listdir, text),
                                      path)
        if isinstance(os.fspath(path), bytes):
            return [os.fsencode(name) for name in names]
        return names

    def scandir(self, path: PathArg | int = ".") -> SimScandirIterator:
        if isinstance(path, int):
            path = self._file(path).path
        text = self._readable("os.scandir", path)
        self._lookup(text)

        def entries() -> list[os.DirEntry[str]]:
            with os.scandir(text) as iterator:
                return list(iterator)

        # os.DirEntry's own methods are C and stat the real file directly.
        found = self._run("scandir", text, lambda: self._real(entries), path)
        if isinstance(os.fspath(path), bytes):
            with_bytes = self._real(lambda: list(os.scandir(os.fsencode(text))))
            return SimScandirIterator(cast(list[SimDirEntry], with_bytes))
        return SimScandirIterator(cast(list[SimDirEntry], found))

    def chdir(self, path: PathArg | int) -> None:
        if isinstance(path, int):
            open_file = self._file(path)
            if not open_file.is_dir:
                raise simulated_oserror(errno.ENOTDIR)
            text = open_file.path
        else:
            text = self._readable("os.chdir", path)
        self._lookup(text)

        def effect() -> None:
            if not self._real(os.path.isdir, text):
                self._real(os.stat, text)  # ENOENT as the real call
                raise simulated_oserror(errno.ENOTDIR)
            self._group.cwd = text
            self._group.cwd_id = None

        self._run("chdir", text, effect, None if isinstance(path, int) else path)

    # -- descriptors ------------------------------------------------------------------

    def _file(self, fd: int) -> MachineFile:
        open_file = lookup_fd(self._fds, fd)
        assert isinstance(open_file, MachineFile)
        return open_file

    def open(self, path: PathArg, flags: int, mode: int = 0o777, *,
             dir_fd: int | None = None) -> int:
        if self.absolute(path, dir_fd) == _NULL:
            return self._open_null(flags)
        text = self._readable("open", path, dir_fd)
        if flags & _CHANGES or (_TMPFILE and flags & _TMPFILE == _TMPFILE):
            raise self.escape(
                f"open({os.fspath(path)!r}, {_flag_names(flags)}) would change the real "
                "machine: " + self._why_read_only(path))
        self._lookup(text)

        def effect() -> int:
            real_fd = self._real(os.open, text, os.O_RDONLY | os.O_CLOEXEC
                                 | (flags & _KEPT_FLAGS))
            try:
                found = self._real(os.fstat, real_fd)
                self._checked(text, found)
            except BaseException:
                self._real(os.close, real_fd)
                raise
            is_dir = (found.st_mode & 0o170000) == 0o040000
            open_file = MachineFile(real_fd, text, _identity(found), is_dir,
                                    self._world._next_ofd_id())
            open_file.mount = self
            open_file.flags = status_flags(os.O_RDONLY | (flags & _KEPT_FLAGS))
            fd = allocate_fd(self._fds, open_file)
            return fd

        fd: int = self._run("open", text, effect, path)
        return fd

    def _open_null(self, flags: int) -> int:
        """``os.open("/dev/null", ...)``: a descriptor of the host's null device.

        dill opens ``os.devnull`` through ``_pyio.open`` (``os.open``) at its
        import, to learn the types of file objects (issue 30: datasets and
        torch import it).  The real /dev/null is opened read-only, which
        reads as the end of the file as the host's does; a write through a
        descriptor opened for writing is swallowed whole (drivers/char/mem.c,
        write_null), never made.
        """
        if flags & os.O_CREAT and flags & os.O_EXCL:
            raise simulated_oserror(errno.EEXIST, _NULL)
        self._lookup(_NULL)

        def effect() -> int:
            real_fd = self._real(os.open, _NULL, os.O_RDONLY | os.O_CLOEXEC)
            found = self._real(os.fstat, real_fd)
            open_file = MachineFile(real_fd, _NULL, _identity(found), False,
                                    self._world._next_ofd_id())
            open_file.mount = self
            open_file.writable = flags & os.O_ACCMODE != os.O_RDONLY
            open_file.readable = flags & os.O_ACCMODE != os.O_WRONLY
            open_file.flags = status_flags(flags & (os.O_ACCMODE | os.O_APPEND | os.O_NONBLOCK))
            return allocate_fd(self._fds, open_file)

        fd: int = self._run("open", _NULL, effect, _NULL)
        return fd

    def close(self, fd: int) -> None:
        open_file = self._file(fd)
        del self._fds[fd]
        self._run("close", open_file.path, lambda: self._release(open_file))

    def close_quietly(self, fd: int) -> None:
        open_file = self._fds.pop(fd, None)
        if isinstance(open_file, MachineFile):
            self._release(open_file)

    def _release(self, open_file: MachineFile) -> None:
        open_file.refs -= 1
        if open_file.refs == 0:
            self._real(os.close, open_file.real_fd)

    def dup(self, fd: int) -> int:
        open_file = self._file(fd)
        open_file.refs += 1
        return allocate_fd(self._fds, open_file)

    def fstat(self, fd: int) -> os.stat_result:
        open_file = self._file(fd)
        return self._run("fstat", open_file.path, lambda: self._fstat(open_file))

    def _fstat(self, open_file: MachineFile) -> os.stat_result:
        found = self._real(os.fstat, open_file.real_fd)
        if _identity(found) != open_file.identity:
            raise self.escape(
                f"the real file {open_file.path!r} changed while it was open (opened as "
                f"{_shown_identity(open_file.identity)}, now "
                f"{_shown_identity(_identity(found))}): the machine's files must stay as "
                "they were while a world reads them")
        return found

    def _read(self, open_file: MachineFile, length: int, offset: int | None) -> bytes:
        if length < 0 or (offset is not None and offset < 0):
            raise simulated_oserror(errno.EINVAL)
        if open_file.is_dir:
            raise simulated_oserror(errno.EISDIR)
        size = self._fstat(open_file).st_size
        start = open_file.pos if offset is None else offset
        # RawIOBase.readall asks for everything (1 << 62 bytes): the rest of
        # the file is all there is (a file that grows is refused above).
        length = min(length, max(size - start, 0))
        data = self._real(os.pread, open_file.real_fd, length, start)
        if offset is None:
            open_file.pos = start + len(data)
        return data

    # read, pread and readinto: DescriptorReads, over this _read.

    def lseek(self, fd: int, position: int, how: int) -> int:
        open_file = self._file(fd)
        if how == os.SEEK_SET:
            base = 0
        elif how == os.SEEK_CUR:
            base = open_file.pos
        elif how == os.SEEK_END:
            base = self._fstat(open_file).st_size
        else:
            raise simulated_oserror(errno.EINVAL)
        if base + position < 0:
            raise simulated_oserror(errno.EINVAL)
        open_file.pos = base + position
        return open_file.pos

    def fsync(self, fd: int) -> None:
        open_file = self._file(fd)
        self._run("fsync", open_file.path, lambda: None)

    def advise(self, fd: int, advice: int) -> None:
        open_file = self._file(fd)
        self._run("posix_fadvise", open_file.path, lambda: None)

    def write(self, fd: int, data: Buffer) -> int:
        open_file = self._file(fd)
        if open_file.path == _NULL and open_file.writable:
            size: int = self._run("write", _NULL, lambda: memoryview(data).nbytes)
            return size
        raise simulated_oserror(errno.EBADF)  # opened read-only, as every machine file is

    def pwrite(self, fd: int, data: Buffer, offset: int) -> int:
        if offset >= 0 and self._file(fd).path == _NULL:
            return self.write(fd, data)
        raise simulated_oserror(errno.EBADF)

    def ftruncate(self, fd: int, length: int) -> None:
        raise simulated_oserror(errno.EINVAL)  # ftruncate(2) of a read-only descriptor

    def flock(self, fd: int, operation: int) -> None:
        raise self._refuse_change("fcntl.flock", self._file(fd).path)

    def lockf(self, fd: int, command: int, length: int = 0, start: int = 0,
              whence: int = 0) -> None:
        raise self._refuse_change("fcntl.lockf", self._file(fd).path)

    def lock_test(self, fd: int, length: int) -> bool:
        raise self._refuse_change("os.lockf(F_TEST)", self._file(fd).path)

    # -- changes: refused -------------------------------------------------------------

    def refuse(self, call: str, path: object) -> SimulationEscape:
        """The escape for a change of the machine's files (``call`` as the program made it)."""
        return self._refuse_change(call, path)


def _flag_names(flags: int) -> str:
    names = [name for name in ("O_WRONLY", "O_RDWR", "O_CREAT", "O_EXCL", "O_TRUNC",
                               "O_APPEND") if flags & getattr(os, name)]
    return "|".join(names) or "O_RDONLY"


def _shown_identity(identity: tuple[int, ...] | None) -> str:
    if identity is None:
        return "absent"
    if len(identity) == 3:
        return f"a directory, inode {identity[1]}"
    return f"inode {identity[1]}, {identity[3]} bytes, mtime_ns {identity[4]}"
