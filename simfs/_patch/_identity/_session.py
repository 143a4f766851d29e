"""A simulated process's session and terminal: its own session, no terminal.

The real answers belong to the test process: its process group and session
(a shell's job, pytest-xdist's worker, a CI runner), its terminal (a
developer's tty is 211 columns, a CI job has none) and its login name.
Code branches on them (progress bars and log formats on ``isatty``, column
widths on ``get_terminal_size``), so a seed ran differently per machine.

Inside the world each simulated process runs as a batch job started by
init in a fresh session, as its ``/proc/<pid>/stat`` says (ppid 1, pgrp
and session = its pid):

- ``os.getpgrp()``, ``getpgid(0)`` and ``getsid(0)`` are its pid; for
  another live simulated process on the same host, that process's pid; for
  any other pid ``ESRCH``, as the kernel answers for a pid it does not know.
- ``os.setsid()``, ``setpgid`` and ``setpgrp`` on itself: ``EPERM``, the
  kernel's answer for a session leader (``setsid(2)``: the caller already
  leads a process group; ``setpgid(2)``: "pid is a session leader"); on
  another pid ``ESRCH`` (it is not this process's child).
- No terminal: ``os.isatty`` is False for every descriptor; ``ttyname`` and
  ``get_terminal_size`` on its standard streams or its files are
  ``ENOTTY``, as for a batch job's pipes (``shutil.get_terminal_size``
  then falls back to ``COLUMNS``/``LINES`` of the simulated environment, or
  80x24); ``os.getlogin()`` is ``ENXIO`` (no login session, measured in a
  container).  Descriptors the process does not hold follow ``_fds``.

Signals never reach a real process.  ``os.kill(pid, 0)``, how lock files
check that their holder lives, succeeds for a live simulated process on
the same host (its pid, its group ``-pid``, ``0`` for itself, ``-1`` for
any other) and is ``ESRCH`` for any other pid; a signal number the kernel
does not know is ``EINVAL`` (``valid_signal``: 0 to ``_NSIG`` = 64).
Delivering a real signal is not simulated: a ``SimulationEscape`` naming
the call, as for ``signal.pthread_kill`` and ``signal.raise_signal``.
"""

from __future__ import annotations

import errno
import os
import signal
from typing import Any

from ..._engine._scheduler import Process
from ..._errors import simulated_oserror
from .._files import _fds
from .._registry import escape, in_world, patch

_STDIO = (0, 1, 2)


def is_live_pid(process: Process, pid: int) -> bool:
    """Whether ``pid`` is a live simulated process on ``process``'s host.

    Another host is another machine: its pids mean nothing here.
    """
    return any(other.group.pid == pid and other.active for other in process.syscalls.host_processes)


def as_int(value: Any) -> int:
    """``value`` as a pid, signal or resource number, refused as CPython's C
    argument parsing words it (a bool counts as no integer here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"'{type(value).__name__}' object cannot be interpreted as an integer")
    return int(value)


def same_session(process: Process, pid: int) -> int:
    """The process group (= session, = pid) of ``pid`` as seen from ``process``."""
    pid = as_int(pid)
    if pid == 0:
        return int(process.group.pid)
    if pid > 0 and is_live_pid(process, pid):
        return pid
    raise simulated_oserror(errno.ESRCH)


def _set_group(process: Process, pid: int = 0, pgid: int = 0) -> None:
    if pid in (0, process.group.pid):
        raise simulated_oserror(errno.EPERM)  # a session leader cannot change its group
    raise simulated_oserror(errno.ESRCH)  # only a child's group could be set


def _no_terminal(process: Process, fd: Any, call: str) -> Any:
    """``ENOTTY`` for a descriptor the process holds; ``_fds``'s answer for any other."""
    if not isinstance(fd, int):
        fd = fd.fileno()
    if fd in _STDIO or process.syscalls.owns_fd(fd):
        raise simulated_oserror(errno.ENOTTY)
    _fds.refuse_foreign(process, fd, f"os.{call}({fd})")


# valid_signal() in include/linux/signal.h: 1.._NSIG, and 0 to probe.
_NSIG = 64


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def kill(process: Process, pid: Any, sig: Any) -> None:
    """``os.kill`` inside the world: probe simulated processes, deliver nothing real.

    Raises:
        ProcessLookupError: no live simulated process on this host matches ``pid``.
        OSError: ``EINVAL`` for a signal number the kernel does not know.
        SimulationEscape: a real signal (not 0) to a simulated process.
    """
    sig = as_int(sig)
    pid = as_int(pid)
    own = int(process.group.pid)
    if pid == 0:
        found = True  # its own process group
    elif pid == -1:  # every process it may signal, except itself
        found = any(other.group.pid != own and other.active
                    for other in process.syscalls.host_processes)
    else:
        found = is_live_pid(process, abs(pid))  # a pid, or the group it leads
    if not found:
        raise simulated_oserror(errno.ESRCH)
    if not 0 <= sig <= _NSIG:
        raise simulated_oserror(errno.EINVAL)
    if sig != 0:
        raise escape(process, f"os.kill({pid}, {_signal_name(sig)}) would deliver a signal; "
                              "simfs does not simulate signals (os.kill(pid, 0) probes a "
                              "simulated process)")


def _pthread_kill(process: Process, ident: Any, sig: Any) -> None:
    sig = as_int(sig)
    if not any(thread.ident == ident and thread.active for thread in process.group.live_threads):
        raise simulated_oserror(errno.ESRCH)
    if not 0 <= sig <= _NSIG:
        raise simulated_oserror(errno.EINVAL)
    if sig != 0:
        raise escape(process, f"signal.pthread_kill({ident}, {_signal_name(sig)}) would "
                              "deliver a signal; simfs does not simulate signals")


def _raise_signal(process: Process, sig: Any) -> None:
    sig = as_int(sig)
    raise escape(process, f"signal.raise_signal({_signal_name(sig)}) would signal the test "
                          "process itself; simfs does not simulate signals")


def _getlogin(process: Process) -> str:
    raise simulated_oserror(errno.ENXIO)  # no login session: no utmp entry, no terminal


def _terminal_size(process: Process, fd: int = 1) -> Any:
    return _no_terminal(process, fd, "get_terminal_size")


def install() -> None:
    patch(os, "getpgrp", in_world(os.getpgrp, lambda process: process.group.pid))
    patch(os, "getpgid", in_world(
        os.getpgid, same_session))
    patch(os, "getsid", in_world(
        os.getsid, same_session))
    patch(os, "setsid", in_world(os.setsid, lambda process: _set_group(process)))
    patch(os, "setpgid", in_world(os.setpgid, _set_group))
    patch(os, "setpgrp", in_world(os.setpgrp, lambda process: _set_group(process)))
    patch(os, "ttyname", in_world(
        os.ttyname, lambda process, fd: _no_terminal(process, fd, "ttyname")))
    patch(os, "get_terminal_size", in_world(os.get_terminal_size, _terminal_size))
    patch(os, "getlogin", in_world(os.getlogin, _getlogin))
    patch(signal, "pthread_kill", in_world(signal.pthread_kill, _pthread_kill))
    patch(signal, "raise_signal", in_world(signal.raise_signal, _raise_signal))
    patch(os, "tcgetpgrp", in_world(
        os.tcgetpgrp, lambda process, fd: _no_terminal(process, fd, "tcgetpgrp")))
