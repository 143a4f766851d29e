"""Native writes to the real disk from a simulated process, caught by seccomp.

The audit hook (``_audit``) sees every *Python* file call; native code (a C
or Rust extension, a ``ctypes`` call of a function resolved before the run)
raises no audit event, and the sentinel working directory (``_boundary``)
only catches relative paths.  ``libc.open(b"/tmp/x", O_CREAT|O_WRONLY)``
from a simulated process therefore wrote the real disk silently.

This guard closes that hole for *writes*, opt-in (``SIMFS_NATIVE_GUARD=1``
or ``simfs.native_guard(True)``), on Linux x86_64 and aarch64:

- One seccomp filter, installed once on a dedicated *spawner* thread (with
  ``PR_SET_NO_NEW_PRIVS``, so no privilege is needed).  Every simulated
  process's OS thread is started by the spawner or by another simulated
  thread, so it inherits that one filter and its one listener descriptor;
  pytest's thread, the main thread and the supervisor are never filtered
  (a filter without TSYNC binds only its thread and the threads it starts).
- The filter answers ``SECCOMP_RET_USER_NOTIF`` for the syscalls that change
  the filesystem: ``open``/``openat`` with a write flag (``O_WRONLY``,
  ``O_RDWR``, ``O_CREAT``, ``O_TRUNC``, ``O_APPEND``; checked in BPF, so
  reads of code and shared libraries never leave the kernel), ``creat``,
  ``openat2`` (its flags are in memory: read by the supervisor), ``mkdir``,
  ``mknod``, ``unlink``, ``rmdir``, ``rename``, ``link``, ``symlink``,
  ``truncate``, the ``chmod``/``chown``/``utime`` families and the
  ``setxattr``/``removexattr`` pair (their ``*at`` forms included), and
  ``SECCOMP_RET_ALLOW`` for everything else.
- A supervisor thread receives each notification, reads the paths from
  ``/proc/<tid>/mem`` and lets the call go on (``SECCOMP_USER_NOTIF_FLAG_
  CONTINUE``) when simfs announced it: the thread is not a simulated
  process's, or a Python-level real access of that path was just allowed on
  that thread (an audit event raised while routing is off: ``real_outside``,
  ``outside_world``, the import machinery writing a ``.pyc``).  Anything
  else is a native escape: the call fails with ``EACCES`` (what a write to a
  directory one may not write gives, so native code takes its ordinary
  error path, as with the sentinel cwd) and a ``SimulationEscape`` naming the
  process, its host, the syscall and the path is recorded on the world, which
  ``run()`` re-raises.

Not covered: native *reads* of real files (allowed in BPF, see above), and a
write made by native code while it holds the GIL (the supervisor is a Python
thread and would wait for the GIL forever: none did in the fast tier run
with the guard on, but an extension could).  This is a tripwire for honest code,
not a sandbox: with ``CONTINUE`` a racing thread could change the path after
the check (seccomp_unotify(2)).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..._engine._scheduler import Process

import _thread

from . import _seccomp as seccomp

# EACCES, not EPERM: what a write into a directory one may not write gives, so
# native code takes its ordinary error path (as with the sentinel cwd).
_DENY = errno.EACCES

# Audit events for Python-level calls that reach a syscall the filter reports,
# and the indexes of their path arguments.
_ANNOUNCING = {
    "open": (0,), "os.mkdir": (0,), "os.remove": (0,), "os.rmdir": (0,),
    "os.rename": (0, 1), "os.link": (0, 1), "os.symlink": (0, 1), "os.chmod": (0,),
    "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,), "os.setxattr": (0,),
    "os.removexattr": (0,),
}


class _Guard:
    """The interpreter's one guard: its state, spawner and supervisor."""

    def __init__(self) -> None:
        self.tried = False
        self.active = False
        self.why = "off: opt in with SIMFS_NATIVE_GUARD=1 or simfs.native_guard(True)"
        self.listener = -1
        self.names: dict[int, str] = {}
        # tid -> the simulated process whose OS thread it is.
        self.processes: dict[int, Process] = {}
        # tid -> paths of the Python-level real access just allowed on it (None: any).
        self.tokens: dict[int, frozenset[bytes] | None] = {}
        # tids of filtered threads (the spawner and every thread it started).
        self.guarded: set[int] = set()
        self.requests: list[tuple[Callable[..., object], tuple[Any, ...]]] = []
        # A real lock (threading's are routed inside the world) used as a wake-up.
        self.wake = _thread.allocate_lock()
        self.wake.acquire()


_guard = _Guard()
_libc: Any = None
_hook_added = False
_gettid_number = -1


def status() -> str:
    """Whether native writes are guarded here, and if not, why."""
    if not _guard.tried and _asked_by_environment():
        enable()
    return "on: seccomp user notification guards native writes" if _guard.active \
        else _guard.why


def _asked_by_environment() -> bool:
    """``SIMFS_NATIVE_GUARD=1`` in the real environment (read outside the world only:
    inside a simulated process ``os.environ`` is that process's)."""
    from ..._engine._scheduler import current_process

    return current_process() is None and os.environ.get("SIMFS_NATIVE_GUARD") == "1"


def enable() -> str:
    """Install the guard if this machine allows it; return its status.

    Where seccomp is unavailable (another architecture, an old kernel, a
    container profile that forbids it) runs go on as before and
    ``status()`` says why.
    """
    if _guard.tried:
        return status()
    from ..._engine._scheduler import current_process

    if current_process() is not None:
        return "off: enable the guard outside the world (before run()), not from a process"
    _guard.tried = True
    why = _install()
    if why is not None:
        _guard.why = f"off: {why}"
    return status()


def start_thread(function: Callable[..., object], args: tuple[Any, ...]) -> None:
    """Start a simulated process's OS thread, under the guard when it is on.

    The scheduler calls this instead of ``_thread.start_new_thread`` once the
    guard is on (``SIMFS_NATIVE_GUARD`` is read when a World is made).
    """
    if _gettid() in _guard.guarded:
        # A filtered thread's children inherit its filter: start it here.
        _thread.start_new_thread(_guarded_body, (function, args))
        return
    _guard.requests.append((function, args))
    with contextlib.suppress(RuntimeError):  # already awake: it will see the request
        _guard.wake.release()


def _gettid() -> int:
    # The OS thread id; threading.get_native_id is the simulated one inside the world.
    tid: int = _libc.syscall(_gettid_number)
    return tid


def _guarded_body(function: Callable[..., object], args: tuple[Any, ...]) -> None:
    tid = _gettid()
    _guard.guarded.add(tid)
    _guard.processes[tid] = args[0]  # the scheduler's _bootstrap(process)
    try:
        function(*args)
    finally:
        _guard.processes.pop(tid, None)
        _guard.tokens.pop(tid, None)
        _guard.guarded.discard(tid)


def _install() -> str | None:
    global _libc, _gettid_number
    machine = platform.machine()
    if sys.platform != "linux" or machine not in seccomp.ARCHES:
        return (f"seccomp user notification is only wired for Linux x86_64 and aarch64, "
                f"not {sys.platform} {machine}")
    _gettid_number = seccomp.GETTID[machine]
    try:
        _libc = ctypes.CDLL(None, use_errno=True)
    except OSError as error:
        return f"libc could not be loaded: {error}"
    release = os.uname().release
    try:
        version = tuple(int(part) for part in release.split("-")[0].split(".")[:2])
    except ValueError:
        version = (0, 0)
    if version < (5, 5):
        # NEW_LISTENER came in 5.0, SECCOMP_USER_NOTIF_FLAG_CONTINUE in 5.5: without
        # it the supervisor could not let an announced call go on.
        return f"seccomp user notification needs Linux >= 5.5 (this kernel: {release})"
    if _libc.prctl(seccomp.PR_GET_SECCOMP, 0, 0, 0, 0) != 0:
        return "this thread already runs under a seccomp filter"
    installed: list[str | None] = []
    ready = _thread.allocate_lock()
    ready.acquire()

    def spawner() -> None:
        listener, names, why = seccomp.install_filter(_libc, machine)
        _guard.listener, _guard.names = listener, names
        installed.append(why)
        if installed[0] is None:
            _guard.guarded.add(_gettid())
        ready.release()
        if installed[0] is not None:
            return
        while True:
            _guard.wake.acquire()
            while _guard.requests:
                function, args = _guard.requests.pop(0)
                _thread.start_new_thread(_guarded_body, (function, args))

    _thread.start_new_thread(spawner, ())
    ready.acquire()
    if installed[0] is not None:
        return installed[0]
    _guard.active = True
    from ..._engine import _scheduler

    _scheduler.thread_starter = start_thread  # and worlds made from now on use threads
    global _hook_added
    if not _hook_added:
        _hook_added = True
        sys.addaudithook(_announce)
    _thread.start_new_thread(_supervise, (_guard,))
    return None


def _forget_in_child() -> None:
    """A forked child has neither the spawner nor the supervisor: start unguarded."""
    global _guard
    listener = _guard.listener
    _guard = _Guard()
    from ..._engine import _scheduler

    _scheduler.thread_starter = _thread.start_new_thread
    if listener >= 0:
        with contextlib.suppress(OSError):
            os.close(listener)


os.register_at_fork(after_in_child=_forget_in_child)


def _announce(event: str, args: tuple[Any, ...]) -> None:
    """Audit hook: a Python-level real access allowed on a guarded thread."""
    indexes = _ANNOUNCING.get(event)
    if indexes is None or not _guard.guarded:
        return
    tid = _gettid()
    if tid not in _guard.guarded:
        return
    from ..._engine._scheduler import current_process
    from ._audit import import_system_call

    if current_process() is not None and not import_system_call():
        # Routed, or refused by _audit's hook before it acts; the import
        # system's own writes (__pycache__) are allowed there, and here.
        return
    paths: set[bytes] = set()
    for index in indexes:
        value = args[index] if index < len(args) else None
        if isinstance(value, int) or value is None:
            _guard.tokens[tid] = None
            return
        with contextlib.suppress(TypeError):
            paths.add(os.fsencode(value))
    _guard.tokens[tid] = frozenset(paths)


def _supervise(guard: _Guard) -> None:
    notif = seccomp.Notif()
    resp = seccomp.Resp()
    while True:
        ctypes.memset(ctypes.byref(notif), 0, ctypes.sizeof(notif))
        if _libc.ioctl(guard.listener, seccomp.IOCTL_RECV, ctypes.byref(notif)) != 0:
            if ctypes.get_errno() in (errno.EINTR, errno.ENOENT):
                continue
            return
        resp.id = notif.id
        resp.val = 0
        resp.error = 0
        resp.flags = seccomp.FLAG_CONTINUE
        try:
            why = _judge(guard, notif)
        except Exception as error:  # never leave a thread hanging in its syscall
            why = f"(the guard failed to read the call: {error!r})"
        if why is not None:
            resp.error = -_DENY
            resp.flags = 0
        # ENOENT: the thread was killed meanwhile; nothing is waiting for the answer.
        _libc.ioctl(guard.listener, seccomp.IOCTL_SEND, ctypes.byref(resp))


def _judge(guard: _Guard, notif: seccomp.Notif) -> str | None:
    """None to let the call go on; else record the escape and say what it was."""
    tid = notif.pid
    process = guard.processes.get(tid)
    if process is None:
        return None  # not a simulated process's thread (the spawner's own work)
    name = guard.names.get(notif.nr, str(notif.nr))
    _, _, path_args = seccomp.SYSCALLS.get(name, (0, None, ()))
    memory = os.open(f"/proc/{tid}/mem", os.O_RDONLY)
    try:
        paths = [seccomp.read_string(memory, notif.args[index]) for index in path_args]
        if name == "openat2":
            how = os.pread(memory, 8, notif.args[2])
            if not int.from_bytes(how, sys.byteorder) & seccomp.WRITE_FLAGS:
                return None
    finally:
        os.close(memory)
    if _libc.ioctl(guard.listener, seccomp.IOCTL_ID_VALID, ctypes.byref(ctypes.c_uint64(notif.id))):
        return None  # the thread is gone: what was read may be another's memory
    token = guard.tokens.pop(tid, frozenset())
    if token is None or set(paths) & token:
        return None
    shown = ", ".join(repr(os.fsdecode(path)) for path in paths)
    what = (f"native code called {name}({shown}) on the real machine (a C/Rust extension or "
            "ctypes call below every route); it was refused with EACCES. Pass the library "
            "a simulated file object, or a path it opens through Python's open()")
    process.syscalls.escape(what)
    return what
