"""Native file calls of a simulated process below every route, caught by seccomp.

The audit hook (``_audit``) sees every *Python* file call; native code (a C
or Rust extension, a ``ctypes`` call of a function resolved before the run)
raises no audit event, and the sentinel working directory (``_boundary``)
only catches relative paths.  ``libc.open(b"/tmp/x", O_CREAT|O_WRONLY)``
from a simulated process therefore wrote the real disk silently, and a
native open of ``/shared/...`` read a real file of that name or got the real
machine's ENOENT.

This guard closes both holes, opt-in (``SIMFS_NATIVE_GUARD=1`` or
``simfs.native_guard(True)``), on Linux x86_64 and aarch64:

- One seccomp filter, installed once on a dedicated *spawner* thread (with
  ``PR_SET_NO_NEW_PRIVS``, so no privilege is needed).  Every simulated
  process's OS thread is started by the spawner or by another simulated
  thread, so it inherits that one filter; pytest's thread and the main
  thread are never filtered (a filter without TSYNC binds only its thread
  and the threads it starts).
- The filter answers ``SECCOMP_RET_USER_NOTIF`` for the syscalls that change
  the filesystem (``open``/``openat``/``openat2``/``creat``, ``mkdir``,
  ``mknod``, ``unlink``, ``rmdir``, ``rename``, ``link``, ``symlink``,
  ``truncate``, the ``chmod``/``chown``/``utime`` families, ``setxattr``/
  ``removexattr``, their ``*at`` forms) and for those that look at a path
  (the ``stat`` family but for ``fstat``'s ``AT_EMPTY_PATH`` form,
  ``access``, ``readlink``, ``chdir``, ``statfs``, ``execve``), and
  ``SECCOMP_RET_ALLOW`` for everything else (``_seccomp``).
- The supervisor is a separate process (``_guard_helper``), so it answers
  native code that holds this interpreter's GIL (a supervisor thread here
  waited for it forever).  This module tells it, over a pipe and before the
  calls concerned, the simulated mounts' paths (``watch``), the simulated
  processes' thread ids, and each Python-level real access simfs allows on
  such a thread (an audit event raised while routing is off: ``real_outside``,
  ``outside_world``, the import machinery writing a ``.pyc``).  It refuses,
  with ``EACCES`` (what a directory one may not write gives, so native code
  takes its ordinary error path, as with the sentinel cwd), any such call
  under a simulated mount and any unannounced change elsewhere, and reports
  each refusal before answering; ``drain`` (called by ``World.run``) turns
  the reports into a ``SimulationEscape`` naming the process, its host, the
  syscall and the path, which ``run()`` raises.

Not covered: native *reads* of real files outside the simulated mounts, and
threads that native code starts itself (filtered, but not a simulated
process's: their calls go on).  This is a tripwire for honest code, not a
sandbox: with ``CONTINUE`` a racing thread could change the path after the
check (seccomp_unotify(2)).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import platform
import posix
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..._engine._scheduler import Process

import _thread

from . import _seccomp as seccomp

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
        # The supervisor process (_guard_helper.py): what it is told, what it reports.
        self.helper: subprocess.Popen[bytes] | None = None
        self.control = -1
        self.report = -1
        self.mounts: set[str] = set()
        # tid -> the simulated process whose OS thread it is.
        self.processes: dict[int, Process] = {}
        # tid -> process, kept until the supervisor's reports were read (drain()).
        self.history: dict[int, Process] = {}
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
    return ("on: seccomp user notification guards native writes, and native opens and "
            "stats under the simulated mounts" if _guard.active else _guard.why)


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
    _guard.processes[tid] = _guard.history[tid] = args[0]  # the scheduler's _bootstrap(process)
    _tell(f"+ {tid}")
    try:
        function(*args)
    finally:
        _tell(f"- {tid}")
        _guard.processes.pop(tid, None)
        _guard.guarded.discard(tid)


def _tell(message: str) -> None:
    """One line to the supervisor; written before the calls it concerns (with
    ``posix.write``: ``os.write`` is routed on a simulated process's thread)."""
    if _guard.control >= 0:
        with contextlib.suppress(OSError):  # the supervisor is gone: its calls fail ENOSYS
            posix.write(_guard.control, message.encode() + b"\n")


def watch(export: str) -> None:
    """Tell the supervisor a simulated mount's path (``World.run`` calls this)."""
    if _guard.active and export not in _guard.mounts:
        _guard.mounts.add(export)
        _tell("M " + os.fsencode(export).hex())


def drain() -> None:
    """Record on their worlds the escapes the supervisor refused so far.

    ``World.run`` calls this before it looks at its escapes: the supervisor
    writes each report before it answers the call, so every refusal of a
    call that has returned is already in the pipe.
    """
    if _guard.report < 0:
        return
    data = b""
    while True:
        try:
            chunk = os.read(_guard.report, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    for line in data.decode().splitlines():
        tid_text, name, why, *hex_paths = line.split(" ")
        process = _guard.history.get(int(tid_text))
        if process is not None:
            process.syscalls.escape(_describe(name, why, hex_paths))
    for tid in [tid for tid in _guard.history if tid not in _guard.processes]:
        del _guard.history[tid]


def _describe(name: str, why: str, hex_paths: list[str]) -> str:
    if why == "unreadable":
        return (f"native code made a {name} call the guard could not read "
                f"({bytes.fromhex(hex_paths[0]).decode(errors='replace')}); it was refused "
                "with EACCES")
    paths = [os.fsdecode(bytes.fromhex(path)) if path != "-" else "" for path in hex_paths]
    shown = ", ".join(repr(path) for path in paths)
    if why == "mount":
        mount = next((m for m in sorted(_guard.mounts) if any(
            path == m or path.startswith(m + "/") for path in paths)), "?")
        return (f"native code called {name}({shown}) on a path under the simulated mount "
                f"{mount!r}, below every route (a C/C++/Rust extension or a ctypes call, such "
                "as torch.from_file, pyarrow's LocalFileSystem, h5py); the real machine was "
                "not asked and the call failed with EACCES. Open the file with Python's "
                "open() and pass the library the file object, or use a library entry point "
                "simfs routes (docs/design.md, 'Processes and native code')")
    return (f"native code called {name}({shown}) on the real machine (a C/Rust extension or "
            "ctypes call below every route); it was refused with EACCES. Pass the library "
            "a simulated file object, or a path it opens through Python's open()")


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
        listener, _names, why = seccomp.install_filter(_libc, machine)
        _guard.listener = listener
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
    why = _start_helper()
    if why is not None:
        return why
    _guard.active = True
    from ..._engine import _scheduler

    _scheduler.thread_starter = start_thread  # and worlds made from now on use threads
    global _hook_added
    if not _hook_added:
        _hook_added = True
        sys.addaudithook(_announce)
    return None


def _start_helper() -> str | None:
    """Start the supervisor process and hand it the listener (see ``_guard_helper``)."""
    control_read, control_write = os.pipe()
    report_read, report_write = os.pipe()
    with contextlib.suppress(OSError):  # room for many reports between two drains
        fcntl.fcntl(report_write, fcntl.F_SETPIPE_SZ, 1 << 20)
    os.set_blocking(report_write, False)  # a full pipe drops reports, never blocks a call
    os.set_blocking(report_read, False)
    helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_guard_helper.py")
    fds = (_guard.listener, control_read, report_write)
    try:
        _guard.helper = subprocess.Popen(
            [sys.executable, "-I", "-S", helper, *(str(fd) for fd in fds)], pass_fds=fds,
            stdin=subprocess.DEVNULL)
    except OSError as error:
        for fd in (*fds, control_write, report_read):
            os.close(fd)
        return f"the guard's supervisor process could not start: {error}"
    for fd in fds:
        os.close(fd)  # the supervisor holds them; the listener dies with it
    _guard.listener = -1
    _guard.control, _guard.report = control_write, report_read
    # Yama's ptrace_scope=1 lets only an ancestor read /proc/<tid>/mem: name the helper.
    _libc.prctl(seccomp.PR_SET_PTRACER, _guard.helper.pid, 0, 0, 0)
    return None


def _forget_in_child() -> None:
    """A forked child has neither the spawner nor the supervisor: start unguarded."""
    global _guard
    inherited = (_guard.listener, _guard.control, _guard.report)
    _guard = _Guard()
    from ..._engine import _scheduler

    _scheduler.thread_starter = _thread.start_new_thread
    for fd in inherited:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


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
            _tell(f"T {tid} *")
            return
        with contextlib.suppress(TypeError):
            paths.add(os.fsencode(value))
    _tell(f"T {tid} " + " ".join(path.hex() for path in paths))
