"""Loud refusals: subprocesses, process pools, pipes and sockets in a simulated process.

Each raises ``SimulationEscape`` naming the process, its host and what it
tried, and the world re-raises it from ``run()`` even if the code caught it
(docs/design.md, "Unmodified code: the routes").  Socket pairs (trio's own
wake-up channel) are left alone: they never leave the machine and carry no
simulated state.

Every refusal sits at the *first* call that would create something real, so
nothing real exists when it fires (measured before these routes: a spawn
``Pool`` left a real ``resource_tracker`` process running, and
``multiprocessing.util.spawnv_passfds`` started a real child, before an
unrelated ``os.close`` of a real descriptor was refused):

- ``os.pipe``/``pipe2``: real descriptors, the first thing ``spawnv_passfds``
  and ``subprocess`` make;
- ``_posixsubprocess.fork_exec``: the fork itself, however it is reached;
- ``dbm.gnu.open``/``dbm.ndbm.open``: a C library writing the real disk;
- ``multiprocessing.pool.Pool``, ``concurrent.futures.ProcessPoolExecutor``,
  ``multiprocessing``'s ``Process.start`` and its semaphores (``SemLock``,
  a real named semaphore in /dev/shm), refused in their constructors.
"""

from __future__ import annotations

import _posixsubprocess
import _socket
import errno
import os
import socket
import subprocess
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..._engine._scheduler import Process, current_process
from ..._errors import simulated_oserror
from .._imports import when_imported
from .._registry import escape, in_world, patch, real_outside

_PROCESSES = "simulated processes are spawned by World.spawn, not by the program itself"


def _refuse_in_world(real: Any, what: str, *, method: bool = False, why: str = "") -> Any:
    def refuse(process: Process, *args: Any, **kwargs: Any) -> Any:
        # A method's self may be half-built (Popen.__init__): never repr it.
        shown = ", ".join(repr(arg) for arg in args[1 if method else 0:])
        reason = f"; {why}" if why else ""
        if method and args:
            owner = args[0] if isinstance(args[0], type) else type(args[0])
            name = what.format(owner.__name__)
        else:
            name = what
        raise escape(process, f"{name}({shown[:120]}) reaches the real machine{reason}")

    return in_world(real, refuse)


def _object_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    return object.__new__(cls)


# A bind to an ephemeral port on loopback reaches no other machine and lets
# nothing in: urllib3 probes IPv6 so at import (util/connection.py,
# _has_ipv6: bind(("::1", 0))), which every process with its own modules
# runs.  Listening, connecting and sending stay refused.
_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def _bind_route(real: Any) -> Any:
    refuse = _refuse_in_world(real, "socket.bind", method=True)

    def bind(self: Any, address: Any) -> Any:
        if (current_process() is not None and isinstance(address, tuple) and len(address) >= 2
                and address[0] in _LOOPBACK and address[1] == 0):
            return real(self, address)
        return refuse(self, address)

    return bind


def install() -> None:
    patch(subprocess.Popen, "__init__",
          _refuse_in_world(subprocess.Popen.__init__, "subprocess.Popen", method=True))
    patch(socket.socket, "bind", _bind_route(_socket.socket.bind))
    patch(socket.socket, "listen", _refuse_in_world(_socket.socket.listen, "socket.listen",
                                                    method=True))
    for method in ("connect", "connect_ex", "sendto"):
        patch(socket.socket, method,
              _refuse_in_world(getattr(_socket.socket, method), f"socket.{method}",
                               method=True))
    for function in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "create_connection"):
        patch(socket, function, _refuse_in_world(getattr(socket, function),
                                                 f"socket.{function}"))
    for name in ("pipe", "pipe2"):
        if hasattr(os, name):
            patch(os, name, _refuse_in_world(
                getattr(os, name), f"os.{name}",
                why="a pipe is a pair of real descriptors; use a file under the export"))
    patch(_posixsubprocess, "fork_exec", _refuse_in_world(
        _posixsubprocess.fork_exec, "_posixsubprocess.fork_exec", why=_PROCESSES))
    _install_process_wide()
    # ctypes.util.find_library asks the machine's linker cache (ldconfig -p, a
    # subprocess) for an installed library's file name: a read-only question
    # about the installation, answered by the real machine.  trio asks it for
    # libpthread at import (_core/_thread_cache.py), which inside a process
    # was refused as a subprocess (issue 30: datasets imports trio through
    # huggingface_hub).  Loading what it names is judged by the audit hook.
    def find_library(module: ModuleType) -> None:
        patch(module, "find_library", real_outside(module.find_library))

    when_imported("ctypes.util", find_library)
    _install_dbm()
    _install_multiprocessing()


# Calls that change the whole test process (its ids, priority, CPUs, its
# terminal's foreground group) or end it: in a simulated process, refused.
_IDS = ("setuid", "seteuid", "setgid", "setegid", "setreuid", "setregid", "setresuid",
        "setresgid", "setgroups", "initgroups")
_SCHEDULING = ("nice", "setpriority", "sched_setaffinity", "sched_setparam",
               "sched_setscheduler")
_WAITS = ("wait", "wait3", "wait4", "waitid", "waitpid")


def _no_children(real: Any) -> Any:
    """os.wait*: a simulated process has no children (it cannot fork), so ECHILD,
    as the kernel answers; the real call could reap the test process's own."""

    def no_child(process: Process, *args: Any, **kwargs: Any) -> Any:
        raise simulated_oserror(errno.ECHILD)

    return in_world(real, no_child)


# Each group of calls, and why a simulated process may not make them.
_PROCESS_WIDE: tuple[tuple[tuple[str, ...], str], ...] = (
    (_IDS, "simulated processes run as root; changing ids is not simulated"),
    (_SCHEDULING, "it would change the test process's own scheduling"),
    (("tcsetpgrp", "login_tty"), "a simulated process has no terminal"),
    (("abort", "_exit"), "it would end the test process itself (sys.exit ends a simulated one)"),
    (("unshare", "setns"), "it would move the test process itself into other namespaces"),
)


def _install_process_wide() -> None:
    for names, why in _PROCESS_WIDE:
        for name in names:
            if hasattr(os, name):
                patch(os, name, _refuse_in_world(getattr(os, name), f"os.{name}", why=why))
    for name in _WAITS:
        if hasattr(os, name):
            patch(os, name, _no_children(getattr(os, name)))


def _install_dbm() -> None:
    """dbm.gnu and dbm.ndbm: C libraries (gdbm, ndbm) doing their own file
    I/O at an absolute path, which no route or audit event sees; where one
    is built (Debian's python3 has ndbm), it is shelve's default backend."""
    why = ("the C library does its own file I/O, which the simulation cannot see; "
           "dbm.dumb is plain Python and works, shelve.Shelf(dbm.dumb.open(...)) too")

    def route(name: str) -> Callable[[ModuleType], None]:
        def refuse(module: ModuleType) -> None:
            patch(module, "open", _refuse_in_world(module.open, f"{name}.open", why=why))

        return refuse

    for name in ("dbm.gnu", "dbm.ndbm"):
        when_imported(name, route(name))


def _thread_lock_inside(real: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``multiprocessing.Lock``/``RLock``: inside the world, the process's thread lock.

    A simulated process cannot start another process (``Process.start`` is
    refused), so a multiprocessing lock made in one is only ever shared by
    that process's own threads, which is what a thread lock is, and the
    simulated one waits on the world's clock.  tqdm makes one for its first
    progress bar (``TqdmDefaultWriteLock.create_mp_lock``), which was refused
    as a real named semaphore (issue 30).  Semaphores and the rest stay
    refused.
    """
    import threading

    def make(*args: Any, **kwargs: Any) -> Any:
        if current_process() is None:
            return real(*args, **kwargs)
        # A context's method gets the context as self; the package's names none.
        return threading.Lock() if name == "Lock" else threading.RLock()

    return make


def _install_multiprocessing() -> None:
    # Routed when the program imports them (``_imports``), not imported here.
    why = f"{_PROCESSES}; a ThreadPoolExecutor runs as simulated threads"

    def util(module: ModuleType) -> None:
        patch(module, "spawnv_passfds", _refuse_in_world(
            module.spawnv_passfds, "multiprocessing.util.spawnv_passfds", why=_PROCESSES))

    def pools(what: str, attribute: str) -> Callable[[ModuleType], None]:
        def route(module: ModuleType) -> None:
            # Refused in __new__: a pool refused in __init__ would still exist,
            # and its __del__ would fail on the half-built object.
            patch(getattr(module, attribute), "__new__", staticmethod(_refuse_in_world(
                _object_new, what, method=True, why=why)))

        return route

    def semaphores(module: ModuleType) -> None:
        patch(module.SemLock, "__init__", _refuse_in_world(
            module.SemLock.__init__, "multiprocessing {}", method=True, why=why))

    def processes(module: ModuleType) -> None:
        patch(module.BaseProcess, "start", _refuse_in_world(
            module.BaseProcess.start, "multiprocessing.Process.start", method=True,
            why=_PROCESSES))

    def locks(module: ModuleType) -> None:
        # multiprocessing.Lock/RLock are bound methods of the default context,
        # bound at the package's import: the package's names are routed too.
        for name in ("Lock", "RLock"):
            patch(module, name, _thread_lock_inside(getattr(module, name), name))

    when_imported("multiprocessing", locks)
    when_imported("multiprocessing.context", lambda module: locks(module.BaseContext))
    when_imported("multiprocessing.util", util)
    when_imported("multiprocessing.pool", pools("multiprocessing.pool.{}", "Pool"))
    when_imported("concurrent.futures.process", pools(
        "concurrent.futures.ProcessPoolExecutor", "ProcessPoolExecutor"))
    when_imported("multiprocessing.synchronize", semaphores)
    when_imported("multiprocessing.process", processes)
