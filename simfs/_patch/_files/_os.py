"""Routes for ``os`` (and, through it, ``os.path``, ``pathlib``, ``shutil``).

``os.path.exists`` and friends call ``os.stat`` by attribute, ``os.walk``
calls ``scandir``, ``shutil.rmtree`` uses the fd-based ``open``/``scandir``/
``unlink(dir_fd=)`` calls, and ``pathlib`` calls ``os`` too; routing ``os``
routes them all, running the standard library's own code unchanged.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from typing import Any

from ..._engine._scheduler import Process, current_process, routing
from ..._errors import simulated_oserror
from ..._os import _proc
from ..._os._seam import SyscallSeam
from .._guards import _outside
from .._identity import _session
from .._registry import escape, patch
from . import _fds

# The syscall each route calls, through the typed seam (mypy checks the name).
_Call = Callable[[SyscallSeam], Callable[..., Any]]
# Functions whose first argument is a path (or, for some, a descriptor).
_PATH_CALLS: dict[str, _Call] = {
    "stat": lambda s: s.stat, "open": lambda s: s.open, "listdir": lambda s: s.listdir,
    "scandir": lambda s: s.scandir, "mkdir": lambda s: s.mkdir, "rmdir": lambda s: s.rmdir,
    "remove": lambda s: s.unlink, "unlink": lambda s: s.unlink, "rename": lambda s: s.rename,
    "replace": lambda s: s.rename, "link": lambda s: s.link, "utime": lambda s: s.utime,
    "access": lambda s: s.access, "chmod": lambda s: s.chmod, "truncate": lambda s: s.truncate,
    "readlink": lambda s: s.readlink, "chdir": lambda s: s.chdir,
    "symlink": lambda s: s.symlink, "chown": lambda s: s.chown,
    "lchown": lambda s: _lchown(s),
    "statvfs": lambda s: s.statvfs,
}
def _lchown(syscalls: SyscallSeam) -> Callable[..., None]:
    def lchown(path: Any, uid: int, gid: int) -> None:  # os.lchown takes no other keyword
        syscalls.chown(path, uid, gid, follow_symlinks=False)

    return lchown


# Functions whose first argument is a descriptor.
_FD_CALLS: dict[str, _Call] = {
    "read": lambda s: s.read, "write": lambda s: s.write, "pread": lambda s: s.pread,
    "pwrite": lambda s: s.pwrite, "close": lambda s: s.close, "fsync": lambda s: s.fsync,
    "fdatasync": lambda s: s.fsync, "fstat": lambda s: s.fstat, "lseek": lambda s: s.lseek,
    "ftruncate": lambda s: s.ftruncate, "dup": lambda s: s.dup, "fchmod": lambda s: s.chmod,
    "fchown": lambda s: s.chown, "fstatvfs": lambda s: s.statvfs,
}
# Real things a simulated process must not do: the loud escapes of
# docs/design.md, "Unmodified code: the routes". os.fork and os.forkpty are
# refused by the audit hook instead (_audit): left unwrapped, Python 3.12's
# "multi-threaded, use of fork()" warning names the program's own call, not a
# simfs route, when a program forks outside a world.
_ESCAPES = (
    "system", "popen", "execv", "execve", "execl", "execle", "execlp",
    "execlpe", "execvp", "execvpe", "spawnv", "spawnve", "spawnl", "spawnle", "spawnlp",
    "spawnlpe", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp", "mkfifo",
    "mknod", "chroot", "killpg",
)
_STDIO = (0, 1, 2)
# GRND_NONBLOCK, GRND_RANDOM, GRND_INSECURE: getrandom(2) is EINVAL for any other bit.
_GETRANDOM_FLAGS = 1 | 2 | 4
_STDIO_PASSES = frozenset({"read", "write", "pread", "pwrite", "fsync", "fdatasync", "fstat",
                           "fstatvfs"})
# Python 3.13's os functions name themselves in a NUL path's ValueError;
# open() and older releases say "embedded null byte".
_OS_NAMES_NULL_BYTES = sys.version_info >= (3, 13)
# Calls the host answers itself for /, the export's parents and /proc (_proc).
_HOST_ANSWERS = frozenset({"stat", "access", "readlink", "mkdir"})
# The calls that take a descriptor for a path and name it in their EBADF
# (``Bad file descriptor: 1048576``), as CPython's path_error does; listdir,
# scandir and truncate do not, utime does from 3.13 (measured on 3.11-3.13).
# The calls whose first argument CPython calls ``src`` in its errors.
_TAKES_SRC = frozenset({"rename", "replace", "link", "symlink"})
# The calls whose path may be None (the working directory).
_NULLABLE = frozenset({"listdir", "scandir"})
_NAMES_BAD_FD = frozenset({"stat", "chdir", "chmod", "chown", "statvfs"}
                          | ({"utime"} if sys.version_info >= (3, 13) else set()))


def _path_route(real: Callable[..., Any], name: str, call: _Call) -> Callable[..., Any]:
    host_answers = name in _HOST_ANSWERS
    takes_fd = real in os.supports_fd
    call_name = f"os.{name}"
    names_fd = name in _NAMES_BAD_FD

    def route(*args: Any, **kwargs: Any) -> Any:
        process: Process | None = getattr(routing, "process", None)  # current_process(), inlined
        if process is None:
            if _outside.PREFIXES and args:  # a world runs: a real thread on its export?
                _outside.check(call_name, args[0])
            return real(*args, **kwargs)
        syscalls = process.syscalls
        if not args:
            return call(syscalls)(*args, **kwargs)
        first = args[0]
        if first.__class__ is not str and not isinstance(first, (str, int, bytes)):
            if first is None and name in _NULLABLE:
                return call(syscalls)()  # os.listdir(None): the working directory
            # A Path: its text read once here, not again in every layer
            # below (a poll of marker.exists() read it three times).  The
            # real call names the text, not the Path, in its error too.
            if not hasattr(type(first), "__fspath__"):
                raise _not_a_path(name, takes_fd, first)
            first = os.fspath(first)  # a bad __fspath__ fails as in the real call
            args = (first, *args[1:])
        if first.__class__ is str:
            # A poll's path: a str under the export with no ".." that could
            # climb out is the syscall layer's without a look at the host's
            # own paths (_proc.outside_export's common case, one call fewer).
            if not host_answers or (first.startswith(syscalls.export_prefix)
                                    and "/.." not in first):
                if kwargs or len(args) != 1:
                    return call(syscalls)(*args, **kwargs)
                # A plain call, not a ``*args`` one: CPython runs it in the
                # same C frame, so a process switched out inside it leaves
                # a smaller C stack for greenlet to copy out and back.
                return call(syscalls)(first)
        elif isinstance(first, int) and not takes_fd:
            raise _not_a_path(name, takes_fd, first)
        elif isinstance(first, int) and not syscalls.owns_fd(first):
            if first >= _fds.NR_OPEN:  # EBADF, as for the descriptor calls
                raise simulated_oserror(errno.EBADF, first if names_fd else None)
            # A negative one is no descriptor, but the real calls do not agree
            # on it (os.stat(-1) is EFAULT, os.listdir(-1) lists the working
            # directory): refused loudly rather than answered wrongly.
            raise escape(process, f"os.{real.__name__}({first}) on a real file descriptor")
        outside = _proc.outside_export(process, first) if host_answers else None
        if outside is not None and kwargs.get("dir_fd") is None:
            op = "lstat" if kwargs.get("follow_symlinks") is False else name
            answer = _proc.answer(process, op, outside)
            if _proc.is_answered(answer):
                return answer
        return call(syscalls)(*args, **kwargs)

    return _naming_null_bytes(route, real.__name__) if _OS_NAMES_NULL_BYTES else route


def _not_a_path(name: str, takes_fd: bool, value: object) -> TypeError:
    """The TypeError the real call raises for a first argument that is no path."""
    argument = "src" if name in _TAKES_SRC else "path"
    if name in _NULLABLE:
        kinds = "string, bytes, os.PathLike, integer or None"
    elif takes_fd:
        kinds = "string, bytes, os.PathLike or integer"
    else:
        kinds = "string, bytes or os.PathLike"
    return TypeError(f"{name}: {argument} should be {kinds}, not {type(value).__name__}")


def _naming_null_bytes(route: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``route``, its NUL-in-a-path ``ValueError`` worded as Python 3.13's os words it.

    Only there: a handler around every route costs each error raised
    through it (a poll's ENOENT) a little, for a message older releases
    never give.
    """

    def named(*args: Any, **kwargs: Any) -> Any:
        try:
            return route(*args, **kwargs)
        except ValueError as error:
            # The syscall layer words a NUL in a path as open() does.
            if str(error) == "embedded null byte":
                raise ValueError(f"{name}: embedded null character in path") from None
            raise

    return named


def _fd_route(real: Callable[..., Any], call: _Call) -> Callable[..., Any]:
    # The standard streams are the test process's own: a program's output
    # goes through them, but closing, seeking, truncating or re-owning one
    # would change the test process itself.
    reads_stdio = real.__name__ in _STDIO_PASSES
    name = real.__name__
    fildes = name in _fds.FILDES_CALLS

    def route(fd: Any, *args: Any, **kwargs: Any) -> Any:
        process: Process | None = getattr(routing, "process", None)  # current_process(), inlined
        if process is None:
            return real(fd, *args, **kwargs)
        if not isinstance(fd, int) or (fildes and fd < 0):
            # As CPython converts it: os.fsync(file) takes anything with
            # fileno(), os.read(file, 2) is a TypeError (_fds.descriptor).
            number = _fds.descriptor(fd, name)
            if number is None:
                _fds.refused_by_conversion(real, fd, *args, **kwargs)
            fd = number
        syscalls = process.syscalls
        if syscalls.owns_fd(fd):
            return call(syscalls)(fd, *args, **kwargs)
        if fd in _STDIO:
            if reads_stdio:
                return real(fd, *args, **kwargs)
            raise escape(process, f"os.{real.__name__}({fd}) would change the test "
                                  "process's own standard stream")
        _fds.refuse_foreign(process, fd, f"os.{real.__name__}({fd})")

    return route


def _escape_route(real: Callable[..., Any]) -> Callable[..., Any]:
    def route(*args: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real(*args, **kwargs)
        shown = ", ".join(repr(arg) for arg in args)[:120]
        raise escape(process, f"os.{real.__name__}({shown}) is not simulated")

    return route


def _advertise(original: object, route: Callable[..., Any]) -> None:
    """List a route in the ``os.supports_*`` sets its original is in.

    ``shutil.copystat`` (copytree/copy2/move of a symlink) calls ``os.stat``
    with ``follow_symlinks=False`` only if ``os.stat in
    os.supports_follow_symlinks``; without this it would call a no-op.
    """
    for supported in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks,
                      os.supports_effective_ids):
        if original in supported:
            supported.add(route)


def install() -> None:
    for name, call in _PATH_CALLS.items():
        route = _path_route(getattr(os, name), name, call)
        _advertise(patch(os, name, route), route)
    for name, call in _FD_CALLS.items():
        route = _fd_route(getattr(os, name), call)
        _advertise(patch(os, name, route), route)
    for name in _ESCAPES:
        if hasattr(os, name):
            patch(os, name, _escape_route(getattr(os, name)))
    _install_specials()


def _install_specials() -> None:
    real_lstat = os.lstat
    real_getcwd = os.getcwd
    real_getpid = os.getpid
    real_urandom = os.urandom
    real_getrandom = os.getrandom
    real_getcwdb = os.getcwdb
    real_sendfile = os.sendfile
    real_isatty = os.isatty
    real_kill = os.kill
    real_uname = os.uname

    def lstat(path: Any, *, dir_fd: int | None = None) -> os.stat_result:
        process = current_process()
        if process is None:
            if _outside.PREFIXES:
                _outside.check("os.lstat", path)
            return real_lstat(path, dir_fd=dir_fd)
        outside = _proc.outside_export(process, path) if dir_fd is None else None
        if outside is not None:
            answer = _proc.answer(process, "lstat", outside)
            if isinstance(answer, os.stat_result):
                return answer
        return process.syscalls.stat(path, dir_fd=dir_fd, follow_symlinks=False)

    def getcwd() -> str:
        process = current_process()
        return real_getcwd() if process is None else process.syscalls.getcwd()

    def getpid() -> int:
        # Threads share their process's pid; simulated processes differ, so
        # "writer-unique" names built from the pid are as unique as for real.
        process = current_process()
        return real_getpid() if process is None else process.group.pid

    def urandom(size: int) -> bytes:
        process = current_process()
        if process is None:
            return real_urandom(size)
        return process.group_random().randbytes(size)

    def getrandom(size: int, flags: int = 0) -> bytes:
        # The kernel's random bytes, as urandom's: seeded per process.
        process = current_process()
        if process is None:
            return real_getrandom(size, flags)
        if size < 0 or flags & ~_GETRANDOM_FLAGS:
            raise simulated_oserror(errno.EINVAL)
        return process.group_random().randbytes(size)

    def getcwdb() -> bytes:
        process = current_process()
        return real_getcwdb() if process is None else os.fsencode(process.syscalls.getcwd())

    def sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        process = current_process()
        if process is None:
            return real_sendfile(out_fd, in_fd, offset, count)
        syscalls = process.syscalls
        if not (syscalls.owns_fd(out_fd) and syscalls.owns_fd(in_fd)):
            raise escape(process, "os.sendfile between real and simulated descriptors")
        return syscalls.sendfile(out_fd, in_fd, offset, count)

    def isatty(fd: int) -> bool:
        # No simulated process has a terminal (a batch job; see _session).
        return real_isatty(fd) if current_process() is None else False

    def kill(pid: int, signal: int) -> None:
        # os.kill(pid, 0) is how lock files check that their holder lives.
        process = current_process()
        if process is None:
            return real_kill(pid, signal)
        return _session.kill(process, pid, signal)

    def uname() -> os.uname_result:
        process = current_process()
        result = real_uname()
        if process is None:
            return result
        return os.uname_result((result.sysname, process.host.name, result.release,
                                result.version, result.machine))

    def no_xattrs(*args: Any, **kwargs: Any) -> Any:
        # NFSv3 has no extended attributes: shutil.copystat expects ENOTSUP.
        raise simulated_oserror(errno.ENOTSUP)

    for name, route in (("lstat", lstat), ("getcwd", getcwd), ("getpid", getpid),
                        ("urandom", urandom), ("getrandom", getrandom), ("getcwdb", getcwdb),
                        ("sendfile", sendfile), ("isatty", isatty), ("kill", kill),
                        ("uname", uname)):
        patch(os, name, route)
    for name in ("listxattr", "getxattr", "setxattr", "removexattr"):
        if hasattr(os, name):
            patch(os, name, _xattr_route(getattr(os, name), no_xattrs))


def _xattr_route(real: Callable[..., Any], simulated: Callable[..., Any]) -> Callable[..., Any]:
    def route(*args: Any, **kwargs: Any) -> Any:
        if current_process() is None:
            return real(*args, **kwargs)
        return simulated(*args, **kwargs)

    return route
