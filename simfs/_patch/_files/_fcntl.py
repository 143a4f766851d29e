"""Routes for ``fcntl``: flock and lockf get real lock semantics across hosts.

pyfakefs makes them no-ops (docs/design.md, 'Unmodified code'); here they go to the world's lock
table, as Linux NFS sends them to the server's lock manager.

``fcntl.fcntl`` and ``fcntl.ioctl`` inside the world never reach a real
descriptor, as the ``os`` calls do not (``_fds``).  On a simulated file
``F_GETFL`` answers the open file description's flags as Linux keeps them
and ``F_SETFL`` changes the ones Linux lets change (``O_APPEND``,
``O_NONBLOCK``...), so a library that clears ``O_APPEND`` writes at its
offset afterwards (``_os._files.OpenFile.set_flags``).  A number no process can
hold is ``EBADF``; the standard streams, which belong to the test process,
answer ``F_GETFD``/``F_GETFL`` as a batch job's pipes would and are not a
terminal (terminal ``ioctl``s are ``ENOTTY``, as on the process's files);
anything else on a descriptor the process does not hold is a
``SimulationEscape``, since it may be one of the test process's own.

The four routes stand in for builtins, which a class attribute does not
bind (``class Lock: _flock = fcntl.flock`` then ``self._flock(fd, op)``
passes ``fd``): a plain Python function there would receive ``self`` as its
descriptor.  So each route is a ``_NonBinding`` callable, which has no
``__get__``: read from the module or from a class it is the same object, as
the builtin was (portalocker's own suite checks
``FlockLocker().locker is fcntl.flock``; a ``staticmethod`` in the module
failed it, since only a class unwraps one).
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Any

from ..._engine._scheduler import Process, current_process
from ..._errors import simulated_oserror
from .._registry import escape, in_world, patch
from . import _fds

_STDIO = (0, 1, 2)
try:
    import termios
except ImportError:  # no terminals on this platform: nothing asks for one
    _TERMINAL_REQUESTS: frozenset[int] = frozenset()
else:
    # ioctls only a terminal answers: any other file says ENOTTY (tty_ioctl(4)).
    _TERMINAL_REQUESTS = frozenset(getattr(termios, name) for name in (
        "TIOCGWINSZ", "TIOCSWINSZ", "TCGETS", "TCSETS", "TCSETSW", "TCSETSF", "TIOCGPGRP",
        "TIOCSPGRP", "TIOCGSID", "TIOCSCTTY", "TIOCNOTTY", "TIOCOUTQ", "TIOCSTI")
        if hasattr(termios, name))


def _stdio_fcntl(process: Process, fd: int, command: int) -> int:
    """``F_GETFD``/``F_GETFL`` of a standard stream: a batch job's pipe, no close-on-exec."""
    if command == fcntl.F_GETFD:
        return 0
    if command == fcntl.F_GETFL:
        return os.O_RDONLY if fd == 0 else os.O_WRONLY
    raise escape(process, f"fcntl.fcntl({fd}, {command}) would change the test process's "
                          "own standard stream")


def _fd_of(target: Any) -> int:
    fd = target if isinstance(target, int) else int(target.fileno())
    if fd < 0:  # PyObject_AsFileDescriptor's check, before any system call
        raise ValueError(f"file descriptor cannot be a negative integer ({fd})")
    return fd


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
                _fds.refuse_foreign(process, fd, f"fcntl.flock({fd})")
            return real_flock(target, operation)
        process.syscalls.flock(fd, operation)
        return None

    def lockf(target: Any, command: int, length: int = 0, start: int = 0,
              whence: int = 0) -> Any:
        process = current_process()
        fd = _fd_of(target)
        if process is None or not process.syscalls.owns_fd(fd):
            if process is not None:
                _fds.refuse_foreign(process, fd, f"fcntl.lockf({fd})")
            return real_lockf(target, command, length, start, whence)
        process.syscalls.lockf(fd, command, length, start, whence)
        return None

    def fcntl_(process: Process, target: Any, command: int, argument: Any = 0) -> Any:
        fd = _fd_of(target)
        if not process.syscalls.owns_fd(fd):
            if fd in _STDIO:
                return _stdio_fcntl(process, fd, command)
            _fds.refuse_foreign(process, fd, f"fcntl.fcntl({fd}, {command})")
        if command == fcntl.F_GETFL:
            return process.syscalls.getfl(fd)
        if command == fcntl.F_SETFL:
            if not isinstance(argument, int):
                raise escape(process, f"fcntl.fcntl({fd}, F_SETFL, {argument!r}): F_SETFL "
                                      "takes the flags as an int")
            process.syscalls.setfl(fd, argument)
            return 0
        if command == fcntl.F_GETFD:
            return fcntl.FD_CLOEXEC  # every simulated descriptor (os.get_inheritable)
        if command == fcntl.F_SETFD:
            if not isinstance(argument, int) or not argument & fcntl.FD_CLOEXEC:
                raise escape(process, f"fcntl.fcntl({fd}, F_SETFD, {argument!r}) would make "
                                      "the descriptor inheritable: a simulated process runs "
                                      "no other program (exec), so its descriptors stay "
                                      "close-on-exec")
            return 0
        raise escape(process, f"fcntl.fcntl({fd}, {command}) is not simulated; "
                              "use fcntl.lockf or fcntl.flock for locks")

    def ioctl(process: Process, target: Any, request: int, *args: Any) -> Any:
        fd = _fd_of(target)
        owned = process.syscalls.owns_fd(fd)
        if (owned or fd in _STDIO) and request in _TERMINAL_REQUESTS:
            raise simulated_oserror(errno.ENOTTY)  # no simulated descriptor is a terminal
        if not owned:
            _fds.refuse_foreign(process, fd, f"fcntl.ioctl({fd}, {request})")
        raise escape(process, f"fcntl.ioctl({fd}, {request}) is not simulated")

    patch(fcntl, "flock", _unbound(real_flock, flock))
    patch(fcntl, "lockf", _unbound(real_lockf, lockf))
    patch(fcntl, "fcntl", _unbound(real_fcntl, in_world(real_fcntl, fcntl_)))
    patch(fcntl, "ioctl", _unbound(real_ioctl, in_world(real_ioctl, ioctl)))


class _NonBinding:
    # A route as a builtin stands: called, the function; on a class, never
    # bound.  Carries the original's name and documentation, and
    # ``__wrapped__``, so ``inspect.unwrap(fcntl.flock)`` is the real builtin.
    # (No class docstring: each instance has its own ``__doc__`` slot.)

    __slots__ = ("__doc__", "__name__", "__qualname__", "__wrapped__", "_route")

    def __init__(self, original: Any, route: Any) -> None:
        self._route = route
        self.__wrapped__ = original
        self.__name__ = original.__name__
        self.__qualname__ = original.__qualname__
        self.__doc__ = original.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._route(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<simfs route for built-in function {self.__name__}>"


def _unbound(original: Any, route: Any) -> _NonBinding:
    return _NonBinding(original, route)
