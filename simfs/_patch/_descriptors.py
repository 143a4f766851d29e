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
  own are not the program's to close), ``posix_fadvise`` for the hints that
  change nothing a program can see;
- refused: ``POSIX_FADV_DONTNEED`` (it drops cached pages, which changes what
  a later read sees on NFS), ``posix_fallocate``, ``copy_file_range``,
  ``splice``, ``dup2``, ``fpathconf``/``pathconf``, and the blocking and
  inheritable flags, on a simulated descriptor; the flags of a standard
  stream (the test process's own) may be read, not changed.

A descriptor the process does not hold follows ``_fds``: EBADF for a number
no process can hold, an escape for one that may be the test process's own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from .._engine._scheduler import Process, current_process
from .._os._seam import SyscallSeam
from . import _fds
from ._registry import escape, patch

_STDIO = (0, 1, 2)
# posix_fadvise advice that is a hint about access patterns only.
_HINTS = frozenset(getattr(os, name) for name in (
    "POSIX_FADV_NORMAL", "POSIX_FADV_SEQUENTIAL", "POSIX_FADV_RANDOM", "POSIX_FADV_NOREUSE",
    "POSIX_FADV_WILLNEED") if hasattr(os, name))


def _held(process: Process, fd: Any, call: str) -> SyscallSeam:
    """The syscall layer, for a descriptor ``process`` holds; else ``_fds``'s refusal."""
    syscalls = process.syscalls
    if isinstance(fd, int) and not isinstance(fd, bool) and syscalls.owns_fd(fd):
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
        if process is None or (stdio and fd in _STDIO):
            return real(fd, *rest, **kwargs)
        return simulated(process, _held(process, fd, name), fd)(*rest, **kwargs)

    return route


def _refused(process: Process, syscalls: SyscallSeam, fd: int,
             name: str) -> Callable[..., Any]:
    def refuse(*rest: Any, **kwargs: Any) -> Any:
        raise escape(process, f"os.{name}({fd}, ...) on a simulated descriptor is not "
                              "simulated")

    return refuse


def _refusal(name: str) -> Callable[[Process, SyscallSeam, int], Callable[..., Any]]:
    return lambda process, syscalls, fd: _refused(process, syscalls, fd, name)


def _joined(buffers: Sequence[Any]) -> bytes:
    return b"".join(bytes(memoryview(buffer)) for buffer in buffers)


def _scatter(data: bytes, buffers: Sequence[Any]) -> int:
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


def _capacity(buffers: Sequence[Any]) -> int:
    return sum(memoryview(buffer).nbytes for buffer in buffers)


def _readv(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., int]:
    return lambda buffers: _scatter(syscalls.read(fd, _capacity(buffers)), buffers)


def _preadv(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., int]:
    def preadv(buffers: Sequence[Any], offset: int, flags: int = 0) -> int:
        if flags:
            raise escape(process, f"os.preadv({fd}, ..., flags={flags}) is not simulated")
        return _scatter(syscalls.pread(fd, _capacity(buffers), offset), buffers)

    return preadv


def _writev(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., int]:
    return lambda buffers: syscalls.write(fd, _joined(buffers))


def _pwritev(process: Process, syscalls: SyscallSeam, fd: int) -> Callable[..., int]:
    def pwritev(buffers: Sequence[Any], offset: int, flags: int = 0) -> int:
        if flags:
            raise escape(process, f"os.pwritev({fd}, ..., flags={flags}) is not simulated")
        return syscalls.pwrite(fd, _joined(buffers), offset)

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
        if advice not in _HINTS:
            raise escape(process, f"os.posix_fadvise({fd}, {offset}, {length}, {advice}) is "
                                  "not simulated: only the access-pattern hints are")
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


def _two_fd_refusal(real: Callable[..., Any]) -> Callable[..., Any]:
    """copy_file_range and splice: refused if either descriptor is simulated."""
    name = real.__name__

    def route(source: Any, destination: Any, *rest: Any, **kwargs: Any) -> Any:
        process = current_process()
        if process is None:
            return real(source, destination, *rest, **kwargs)
        for fd in (source, destination):
            _held(process, fd, name)
        raise escape(process, f"os.{name}({source}, {destination}, ...) is not simulated")

    return route


_SIMULATED: dict[str, Callable[[Process, SyscallSeam, int], Callable[..., Any]]] = {
    "readv": _readv, "preadv": _preadv, "writev": _writev, "pwritev": _pwritev,
    "lockf": _lockf, "fchdir": _fchdir, "posix_fadvise": _fadvise,
}
# Refused on a simulated descriptor; on a standard stream, the readers run.
_REFUSED_READERS = ("fpathconf", "get_blocking", "get_inheritable")
_REFUSED_CHANGES = ("posix_fallocate", "set_blocking", "set_inheritable", "dup2")


def install() -> None:
    for name, simulated in _SIMULATED.items():
        if hasattr(os, name):
            # A lock on, or a chdir into, the test process's own stream: refused.
            reads_stdio = name not in ("lockf", "fchdir")
            patch(os, name, _fd_call(getattr(os, name), simulated, stdio=reads_stdio))
    for name in _REFUSED_READERS:
        patch(os, name, _fd_call(getattr(os, name), _refusal(name)))
    for name in _REFUSED_CHANGES:
        if hasattr(os, name):
            patch(os, name, _fd_call(getattr(os, name), _refusal(name), stdio=False))
    for name in ("copy_file_range", "splice"):
        if hasattr(os, name):
            patch(os, name, _two_fd_refusal(getattr(os, name)))
    patch(os, "closerange", _closerange(os.closerange))
    patch(os, "pathconf", _pathconf(os.pathconf))
