"""Routes for ``fcntl``: flock and lockf get real lock semantics across hosts.

pyfakefs makes them no-ops (DESIGN §3.3); here they go to the world's lock
table, as Linux NFS sends them to the server's lock manager.
"""

from __future__ import annotations

import fcntl
from typing import Any

from .._engine._scheduler import current_process
from . import _fds
from ._registry import escape, patch

_HARMLESS = {fcntl.F_GETFD: 0, fcntl.F_SETFD: 0, fcntl.F_GETFL: 0, fcntl.F_SETFL: 0}


def _fd_of(target: Any) -> int:
    return target if isinstance(target, int) else int(target.fileno())


def install() -> None:
    real_flock = fcntl.flock
    real_lockf = fcntl.lockf
    real_fcntl = fcntl.fcntl
    real_ioctl = fcntl.ioctl

    def flock(target: Any, operation: int) -> None:
        process = current_process()
        fd = _fd_of(target)
        if process is None or not process.syscalls.owns_fd(fd):
            if process is not None:
                _fds.refuse_impossible(fd)
                raise escape(process, f"fcntl.flock({fd}) on a real file descriptor")
            return real_flock(target, operation)
        process.syscalls.flock(fd, operation)
        return None

    def lockf(target: Any, command: int, length: int = 0, start: int = 0,
              whence: int = 0) -> Any:
        process = current_process()
        fd = _fd_of(target)
        if process is None or not process.syscalls.owns_fd(fd):
            if process is not None:
                _fds.refuse_impossible(fd)
                raise escape(process, f"fcntl.lockf({fd}) on a real file descriptor")
            return real_lockf(target, command, length, start, whence)
        process.syscalls.lockf(fd, command, length, start, whence)
        return None

    def fcntl_(target: Any, command: int, argument: Any = 0) -> Any:
        process = current_process()
        fd = _fd_of(target)
        if process is None or not process.syscalls.owns_fd(fd):
            return real_fcntl(target, command, argument)
        if command in _HARMLESS:
            return _HARMLESS[command]
        raise escape(process, f"fcntl.fcntl({fd}, {command}) is not simulated; "
                              "use fcntl.lockf or fcntl.flock for locks")

    def ioctl(target: Any, request: int, *args: Any) -> Any:
        process = current_process()
        fd = _fd_of(target)
        if process is not None and process.syscalls.owns_fd(fd):
            raise escape(process, f"fcntl.ioctl({fd}, {request}) is not simulated")
        return real_ioctl(target, request, *args)

    patch(fcntl, "flock", flock)
    patch(fcntl, "lockf", lockf)
    patch(fcntl, "fcntl", fcntl_)
    patch(fcntl, "ioctl", ioctl)
