"""The descriptor calls of ``os`` beyond read, write and their kin (``_os``).

Simulated descriptors are numbered from 2**20, so an unrouted C call on one
fails with EBADF rather than touching a real file (``_os/_files.py``); but
EBADF on a descriptor the program holds is a wrong answer, not a refusal.
So inside a simulated process each of these either runs in the simulation
or refuses loudly, naming itself:

- simulated: ``readv``/``writev``/``preadv``/``pwritev`` (one read or write
  of the buffers joined, as the kernel does them), ``os.lockf`` (glibc's
  lockf: a POSIX lock from the offset, F_TEST asking F_GETLK), ``fchdir``,
  ``closerange`` (the simulated descriptors in the range; the test process's
  own are not the program's to close), ``copy_file_range`` between two
  simulated files (NFSv3 has no COPY: the kernel reads and writes through
  the page cache), ``posix_fadvise`` with an access-pattern hint (a no-op,
  one legal outcome even of WILLNEED, whose readahead only warms the cache);
- refused: ``POSIX_FADV_DONTNEED`` (it drops cached pages, which changes what
  a later read sees on NFS), ``posix_fallocate``, ``splice``, ``dup2``,
  ``fpathconf``/``pathconf``, and the blocking and
  inheritable flags, on a simulated descriptor; the flags of a standard
  stream (the test process's own) may be read, not changed.

A descriptor the process does not hold follows ``_fds``: EBADF for a number
no process can hold, an escape for one that may be the test process's own.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Sequence
from typing import Any

from ..._engine._scheduler import Process, current_process
from ..._errors import simulated_oserror
from ..._os._seam import SyscallSeam
from .._registry import escape, patch
from . import _fds

_STDIO = (0, 1, 2)
# posix_fadvise advice that is a hint about access patterns only.
_HINTS = frozenset(getattr(os, name) for name in (
    "POSIX_FADV_NORMAL", "POSIX_FADV_SEQUENTIAL", "POSIX_FADV_RANDOM", "POSIX_FADV_NOREUSE",
    "POSIX_FADV_WILLNEED") if hasattr(os, name))


def _held(process: Process, fd: int, call: str) -> SyscallSeam:
    """The syscall layer, for a descriptor ``process`` holds; else ``_fds``'s refusal."""
    syscalls = process.syscalls
    if syscalls.owns_fd(fd):
        return syscalls
    _fds.refuse_foreign(process, fd, f"os.{call}({fd})")


def _fd_call(real: Callable[..., Any],
             simulated: Callable[[Process, SyscallSeam, int], Callable[..., Any]],
             *, stdio: bool = True) -> Callable[..., Any]:
    """A route: ``simulated(process, syscalls, fd)(*rest)`` for a held descriptor.

    A standard stream goes to ``real`` when ``stdio`` (the call only reads
    what the test process's own stream is).
    """
    name = real.__name__

    def route(fd: Any, *rest: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real(fd, *rest, **kwargs)
        number = _fds.descriptor(fd, name)
        if number is None:
            _fds.refused_by_conversion(real, fd, *rest, **kwargs)
        if stdio and number in _STDIO:
            return real(number, *rest, **kwargs)
        return simulated(process, _held(process, number, name), number)(*rest, **kwargs)

    return route


def _refusal(name: str) -> Callable[[Process, SyscallSeam, int], Callable[..., Any]]:
    """A ``_fd_call`` body that refuses a held descriptor, naming the call."""

    def refused(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., Any]:
        def refuse(*rest: Any, **kwargs: Any) -> Any:
            raise escape(process, f"os.{name}({fd}, ...) on a simulated descriptor is not "
                                  "simulated")

        return refuse

    return refused


def _sequence(buffers: Any, name: str) -> Sequence[Any]:
    if not isinstance(buffers, Sequence):  # readv(2) takes an array, not an iterator
        raise TypeError(f"{name}() arg 2 must be a sequence")
    return buffers


def _writable(buffers: Any, name: str) -> list[memoryview]:
    """The buffers to fill, all checked before anything is read, as CPython does."""
    views = [memoryview(buffer) for buffer in _sequence(buffers, name)]
    if any(view.readonly for view in views):
        raise BufferError("Object is not writable.")
    return views


def _joined(buffers: Any, name: str) -> bytes:
    return b"".join(bytes(memoryview(buffer)) for buffer in _sequence(buffers, name))


def _scatter(data: bytes, buffers: Sequence[memoryview]) -> int:
    """Fill ``buffers`` in order from ``data``; the bytes placed."""
    placed = 0
    for buffer in buffers:
        view = memoryview(buffer).cast("B")
        chunk = data[placed:placed + len(view)]
        view[:len(chunk)] = chunk
        placed += len(chunk)
        if placed == len(data):
            break
    return placed


def _capacity(views: Sequence[memoryview]) -> int:
    return sum(view.nbytes for view in views)


def _readv(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., int]:
    def readv(buffers: Any) -> int:
        views = _writable(buffers, "readv")
        return _scatter(syscalls.read(fd, _capacity(views)), views)

    return readv


def _preadv(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., int]:
    def preadv(buffers: Any, offset: int, flags: int = 0) -> int:
        views = _writable(buffers, "preadv")
        if flags:
            raise escape(process, f"os.preadv({fd}, ..., flags={flags}) is not simulated")
        return _scatter(syscalls.pread(fd, _capacity(views), offset), views)

    return preadv


def _writev(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., int]:
    return lambda buffers: syscalls.write(fd, _joined(buffers, "writev"))


def _pwritev(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., int]:
    def pwritev(buffers: Any, offset: int, flags: int = 0) -> int:
        data = _joined(buffers, "pwritev")
        if flags:
            raise escape(process, f"os.pwritev({fd}, ..., flags={flags}) is not simulated")
        return syscalls.pwrite(fd, data, offset)

    return pwritev


def _lockf(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., None]:
    """glibc's lockf: F_LOCK/F_TLOCK a write lock from the offset, F_ULOCK, F_TEST."""

    def lockf(command: int, length: int) -> None:
        if command == os.F_TEST:
            if syscalls.lock_test(fd, length):
                raise PermissionError(13, os.strerror(13))  # EACCES, as glibc sets it
            return
        commands = {os.F_LOCK: 2, os.F_TLOCK: 2 | 4, os.F_ULOCK: 8}  # LOCK_EX, |LOCK_NB, UN
        if command not in commands:
            raise OSError(22, os.strerror(22))  # EINVAL, as glibc sets it
        syscalls.lockf(fd, commands[command], length, 0, os.SEEK_CUR)

    return lockf


def _fchdir(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[[], None]:
    return lambda: syscalls.chdir(fd)


def _fadvise(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., None]:
    def posix_fadvise(offset: int, length: int, advice: int) -> None:
        if advice == getattr(os, "POSIX_FADV_DONTNEED", None):
            raise escape(process, f"os.posix_fadvise({fd}, {offset}, {length}, "
                                  "POSIX_FADV_DONTNEED) is not simulated: only the "
                                  "access-pattern hints are")
        if length < 0 or advice not in _HINTS:
            raise simulated_oserror(errno.EINVAL)  # fadvise64: as the kernel answers
        syscalls.advise(fd, advice)

    return posix_fadvise


def _closerange(real: Callable[[int, int], None]) -> Callable[[int, int], None]:
    def closerange(low: int, high: int) -> None:
        process = current_process()
        if process is None:
            return real(low, high)
        syscalls = process.syscalls
        for fd in syscalls.held_fds():
            if low <= fd < high:
                with contextlib.suppress(OSError):  # close_range(2) goes on past errors
                    syscalls.close(fd)
        return None

    return closerange


def _pathconf(real: Callable[..., int]) -> Callable[..., int]:
    def pathconf(path: Any, name: Any) -> int:
        process = current_process()
        if process is None:
            return real(path, name)
        raise escape(process, f"os.pathconf({path!r}, {name!r}) is not simulated")

    return pathconf


def _copy_file_range(real: Callable[..., int]) -> Callable[..., int]:
    """Between two simulated files; anything else is refused (shutil on 3.14 calls it)."""

    def copy_file_range(src: Any, dst: Any, count: int, offset_src: int | None = None,
                        offset_dst: int | None = None) -> int:
        process = current_process()
        if process is None:
            return real(src, dst, count, offset_src, offset_dst)
        source, destination = _fds.descriptor(src, "copy_file_range"), _fds.descriptor(dst, "")
        if source is None or destination is None:
            _fds.refused_by_conversion(real, src, dst, count, offset_src, offset_dst)
        for fd in (source, destination):
            _held(process, fd, "copy_file_range")
        return process.syscalls.copy_file_range(source, destination, count, offset_src,
                                                offset_dst)

    return copy_file_range


def _splice(real: Callable[..., Any]) -> Callable[..., Any]:
    """splice needs a pipe, and a simulated process has none: refused."""

    def splice(src: Any, dst: Any, *rest: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real(src, dst, *rest, **kwargs)
        numbers = [_fds.descriptor(fd, "splice") for fd in (src, dst)]
        for number in numbers:
            if number is None:
                _fds.refused_by_conversion(real, src, dst, *rest, **kwargs)
            _held(process, number, "splice")
        raise escape(process, f"os.splice({src}, {dst}, ...) is not simulated")

    return splice


def _get_blocking(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[[], bool]:
    # _Py_get_blocking: F_GETFL, blocking unless O_NONBLOCK.
    return lambda: not syscalls.getfl(fd) & os.O_NONBLOCK


def _set_blocking(process: Process, syscalls: SyscallSeam,
                  fd: int) -> Callable[[Any], None]:
    # _Py_set_blocking: F_GETFL, then F_SETFL with O_NONBLOCK changed.  A
    # regular file ignores the flag for its reads and writes (open(2)), but
    # F_GETFL and get_blocking show it.
    def set_blocking(blocking: Any) -> None:
        flags = syscalls.getfl(fd)
        syscalls.setfl(fd, flags & ~os.O_NONBLOCK if blocking else flags | os.O_NONBLOCK)

    return set_blocking


def _get_inheritable(process: Process, syscalls: SyscallSeam,
                     fd: int) -> Callable[[], bool]:
    # Every simulated descriptor is close-on-exec, as every descriptor
    # Python makes is (PEP 446), and none can be made inheritable: no
    # simulated process runs a program.
    return lambda: False


def _set_inheritable(process: Process, syscalls: SyscallSeam,
                     fd: int) -> Callable[[Any], None]:
    def set_inheritable(inheritable: Any) -> None:
        if inheritable:
            raise escape(process, f"os.set_inheritable({fd}, True): a simulated process "
                                  "runs no other program (exec), so its descriptors stay "
                                  "close-on-exec")

    return set_inheritable


_SIMULATED: dict[str, Callable[[Process, SyscallSeam, int], Callable[..., Any]]] = {
    "readv": _readv, "preadv": _preadv, "writev": _writev, "pwritev": _pwritev,
    "lockf": _lockf, "fchdir": _fchdir, "posix_fadvise": _fadvise,
    "get_blocking": _get_blocking, "get_inheritable": _get_inheritable,
}
# Changes of a descriptor's state: never the test process's own stream.
_SIMULATED_CHANGES: dict[str, Callable[[Process, SyscallSeam, int], Callable[..., Any]]] = {
    "set_blocking": _set_blocking, "set_inheritable": _set_inheritable,
}
# Refused on a simulated descriptor; on a standard stream, the readers run.
_REFUSED_READERS = ("fpathconf",)
_REFUSED_CHANGES = ("posix_fallocate", "dup2")


def install() -> None:
    for name, simulated in _SIMULATED.items():
        if hasattr(os, name):
            # A lock on, or a chdir into, the test process's own stream: refused.
            reads_stdio = name not in ("lockf", "fchdir")
            patch(os, name, _fd_call(getattr(os, name), simulated, stdio=reads_stdio))
    for name, simulated in _SIMULATED_CHANGES.items():
        patch(os, name, _fd_call(getattr(os, name), simulated, stdio=False))
    for name in _REFUSED_READERS:
        patch(os, name, _fd_call(getattr(os, name), _refusal(name)))
    for name in _REFUSED_CHANGES:
        if hasattr(os, name):
            patch(os, name, _fd_call(getattr(os, name), _refusal(name), stdio=False))
    if hasattr(os, "copy_file_range"):
        patch(os, "copy_file_range", _copy_file_range(os.copy_file_range))
    if hasattr(os, "splice"):
        patch(os, "splice", _splice(os.splice))
    patch(os, "closerange", _closerange(os.closerange))
    patch(os, "pathconf", _pathconf(os.pathconf))
