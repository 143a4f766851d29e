"""Native file calls of a simulated process below every route, caught by seccomp.

The audit hook (``_audit``) sees every *Python* file call; native code (a C
or Rust extension, a ``ctypes`` call of a function resolved before the run)
raises no audit event, and the sentinel working directory (``_boundary``)
only catches relative paths.  ``libc.open(b"/tmp/x", O_CREAT|O_WRONLY)``
from a simulated process therefore wrote the real disk silently, and a
native open of ``/shared/...`` read a real file of that name or got the real
machine's ENOENT.

This guard closes both holes, on by default (``SIMFS_NATIVE_GUARD=0`` turns
it off; the first World of the interpreter turns it on), on Linux x86_64 and
aarch64 with kernel 5.5 or later:

- Each simulated process's OS thread (the thread baton) and each engine
  thread of the greenlet baton installs the seccomp filter on itself as it
  starts (with ``PR_SET_NO_NEW_PRIVS``, so no privilege is needed), and
  hands the filter's listener to the supervisor over a Unix socket
  (``SCM_RIGHTS``); threads those threads start inherit the filter.
  pytest's thread and the main thread are never filtered (a filter without
  TSYNC binds only its thread and the threads it starts), and no thread of
  the guard outlives its world: a fork after a run finds a single-threaded
  process, as without the guard.
- The filter answers ``SECCOMP_RET_USER_NOTIF`` for the syscalls that change
  the filesystem (``open``/``openat``/``openat2``/``creat``, ``mkdir``,
  ``mknod``, ``unlink``, ``rmdir``, ``rename``, ``link``, ``symlink``,
  ``truncate``, the ``chmod``/``chown``/``utime`` families, ``setxattr``/
  ``removexattr``, their ``*at`` forms) and for those that look at a path
  (the ``stat`` family but for ``fstat``'s ``AT_EMPTY_PATH`` form,
  ``access``, ``readlink``, ``chdir``, ``statfs``, ``execve``), and
  ``SECCOMP_RET_ALLOW`` for everything else (``_seccomp``).
- With the greenlet baton every process of a world runs on one *engine*
  thread (``start_engine_thread``).  Before
  each switch the engine writes which process is about to run there (a
  per-process key, 0 for the world's own code) into a slot of a memory
  page shared with the supervisor (``_engine_turns``); the supervisor reads
  the slot of the thread whose call it judges, so a refusal names the
  process that made it, and the world's own calls there are not judged.
- The supervisor is a separate process (``_guard_helper``), so it answers
  native code that holds this interpreter's GIL (a supervisor thread here
  waited for it forever).  This module tells it, over a socket and before the
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
import mmap
import os
import platform
import posix
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
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
        self.why = "off: not tried yet (the first World turns it on)"
        # The supervisor process (_guard_helper.py): what it is told, what it reports.
        self.helper: subprocess.Popen[bytes] | None = None
        self.control = -1
        self.report = -1
        self.mounts: set[str] = set()
        # tid -> the simulated process whose OS thread it is.
        self.processes: dict[int, Process] = {}
        # tid -> process, kept until the supervisor's reports were read (drain()).
        self.history: dict[int, Process] = {}
        # tids of filtered threads (every thread that filtered itself).
        self.guarded: set[int] = set()
        # Engine threads of the greenlet baton: tid -> slot in ``shared``,
        # where the engine writes the key of the process it runs (0: none).
        self.engines: dict[int, int] = {}
        self.free_slots: list[int] = []
        self.shared: mmap.mmap | None = None
        self.machine = ""
        # The control socket again, as a socket object: listeners go over it.
        self.channel: socket.socket | None = None


_guard = _Guard()
_libc: Any = None
_hook_added = False
_gettid_number = -1


def status() -> str:
    """Whether native writes are guarded here, and if not, why.

    The first call outside the world turns the guard on, unless
    ``SIMFS_NATIVE_GUARD=0`` in the real environment says not to.

    Raises:
        ValueError: ``SIMFS_NATIVE_GUARD`` is set to something else than 0 or 1.
    """
    if not _guard.tried and _wanted_by_environment():
        enable()
    return ("on: seccomp user notification guards native writes, and native opens and "
            "stats under the simulated mounts" if _guard.active else _guard.why)


def _wanted_by_environment() -> bool:
    """The guard unless ``SIMFS_NATIVE_GUARD=0`` in the real environment (read
    outside the world only: inside a simulated process ``os.environ`` is that
    process's)."""
    from ..._engine._scheduler import current_process

    if current_process() is not None:
        return False
    asked = os.environ.get("SIMFS_NATIVE_GUARD", "1")
    if asked not in ("0", "1"):
        raise ValueError(f"SIMFS_NATIVE_GUARD={asked!r}: use 1 (the native guard on, the "
                         "default) or 0 (off)")
    if asked == "0":
        _guard.tried = True
        _guard.why = ("off: SIMFS_NATIVE_GUARD=0 (native writes, and native reads under the "
                      "simulated mounts, are not caught: docs/libraries.md)")
        return False
    return True


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
    """Start a simulated process's OS thread (the thread baton), under the guard.

    The scheduler calls this instead of ``_thread.start_new_thread`` once the
    guard is on (``SIMFS_NATIVE_GUARD`` is read when a World is made).
    """
    _thread.start_new_thread(_guarded_body, (function, args))


def start_engine_thread(function: Callable[..., object], args: tuple[Any, ...]) -> None:
    """Start an engine OS thread of the greenlet baton, under the guard."""
    _thread.start_new_thread(_guarded_engine_body, (function, args))


def _filter_this_thread() -> int:
    """Filter the calling (new) thread, unless it inherited a filter; its tid."""
    tid = _gettid()
    if _libc.prctl(seccomp.PR_GET_SECCOMP, 0, 0, 0, 0) == 0:
        listener, _names, why = seccomp.install_filter(_libc, _guard.machine)
        if why is not None:
            # The probe at enable() passed on this machine: something changed.
            raise RuntimeError(f"the native guard could not filter a new thread: {why}")
        channel = _guard.channel
        assert channel is not None  # set before any thread is started under the guard
        try:
            socket.send_fds(channel, [b"L\n"], [listener])
        finally:
            os.close(listener)
    _guard.guarded.add(tid)
    return tid


@contextlib.contextmanager
def _filtered(announce: Callable[[int], str]) -> Iterator[int]:
    """A new thread filters itself, tells the supervisor what it is (``+ tid``,
    a process's thread; ``E tid slot``, an engine), and ``- tid`` when it ends."""
    tid = _filter_this_thread()
    _tell(announce(tid))
    try:
        yield tid
    finally:
        _tell(f"- {tid}")
        _guard.guarded.discard(tid)


def _guarded_body(function: Callable[..., object], args: tuple[Any, ...]) -> None:
    with _filtered(lambda tid: f"+ {tid}") as tid:
        _guard.processes[tid] = _guard.history[tid] = args[0]  # _bootstrap(process)
        try:
            function(*args)
        finally:
            _guard.processes.pop(tid, None)


# Slots of the shared page, one per engine thread alive at once (8 bytes each).
_SLOTS = 512


def _guarded_engine_body(function: Callable[..., object], args: tuple[Any, ...]) -> None:
    if not _guard.free_slots:
        raise RuntimeError(f"the native guard has no slot left for another engine thread "
                           f"({_SLOTS} alive at once)")
    slot = _guard.free_slots.pop()
    try:
        with _filtered(lambda tid: f"E {tid} {slot}") as tid:
            _guard.engines[tid] = slot
            try:
                function(*args)
            finally:
                _guard.engines.pop(tid, None)
    finally:
        _guard.free_slots.append(slot)


def _engine_turns(engine_tid: int, process: Process | None) -> None:
    """The engine ``engine_tid`` is about to run ``process`` (None: the world's own code).

    Called by the greenlet baton before every switch: one 8-byte store in the
    page the supervisor reads.  A process's key is its ``id()`` (never a
    thread id: those are below ``pid_max``, 2**22), kept in ``history`` until
    the supervisor's reports about it were read.
    """
    slot = _guard.engines.get(engine_tid)
    shared = _guard.shared
    if slot is None or shared is None:
        return
    key = 0
    if process is not None:
        key = id(process)
        _guard.history[key] = process
    struct.pack_into("Q", shared, slot * 8, key)


def _gettid() -> int:
    # The OS thread id; threading.get_native_id is the simulated one inside the world.
    tid: int = _libc.syscall(_gettid_number)
    return tid


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
    _guard.machine = machine
    why = _probe_filter()
    if why is not None:
        return why
    why = _start_helper()
    if why is not None:
        return why
    _guard.active = True
    from ..._engine import _scheduler

    # Every process's OS thread from now on inherits the filter: the thread
    # baton's threads and the greenlet baton's engine threads.
    _scheduler.thread_starter = start_thread
    _scheduler.engine_starter = start_engine_thread
    _scheduler.engine_turns = _engine_turns
    global _hook_added
    if not _hook_added:
        _hook_added = True
        sys.addaudithook(_announce)
    return None


def _probe_filter() -> str | None:
    """Whether a thread can filter itself here (a container profile may forbid it)."""
    found: list[str | None] = []
    done = _thread.allocate_lock()
    done.acquire()

    def probe() -> None:
        try:
            listener, _names, why = seccomp.install_filter(_libc, _guard.machine)
            if listener >= 0:
                os.close(listener)  # the thread ends: its filter goes with it
            found.append(why)
        finally:
            done.release()

    _thread.start_new_thread(probe, ())
    done.acquire()
    return found[0] if found else "the probe thread failed"


def _start_helper() -> str | None:
    """Start the supervisor process (see ``_guard_helper``).

    The control channel is a Unix socket: each filtered thread sends its
    filter's listener over it (``SCM_RIGHTS``) before its first call.
    """
    control_read_socket, control_write_socket = socket.socketpair(socket.AF_UNIX,
                                                                  socket.SOCK_STREAM)
    control_read, control_write = control_read_socket.detach(), control_write_socket.detach()
    report_read, report_write = os.pipe()
    with contextlib.suppress(OSError):  # room for many reports between two drains
        fcntl.fcntl(report_write, fcntl.F_SETPIPE_SZ, 1 << 20)
    os.set_blocking(report_write, False)  # a full pipe drops reports, never blocks a call
    os.set_blocking(report_read, False)
    helper = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_guard_helper.py")
    try:
        # The engines' slots: which process each engine thread runs (see _engine_turns).
        page = os.memfd_create("simfs-guard-engines", os.MFD_CLOEXEC)
        os.ftruncate(page, _SLOTS * 8)
        _guard.shared = mmap.mmap(page, _SLOTS * 8)
    except (AttributeError, OSError) as error:
        for fd in (control_read, report_write, control_write, report_read):
            os.close(fd)
        return f"the guard's shared page could not be made: {error}"
    _guard.free_slots = list(range(_SLOTS - 1, -1, -1))
    fds = (control_read, report_write, page)
    try:
        _guard.helper = subprocess.Popen(
            [sys.executable, "-I", "-S", helper, *(str(fd) for fd in fds)], pass_fds=fds,
            stdin=subprocess.DEVNULL)
    except OSError as error:
        for fd in (*fds, control_write, report_read):
            os.close(fd)
        return f"the guard's supervisor process could not start: {error}"
    for fd in fds:
        os.close(fd)  # the supervisor holds them
    _guard.control, _guard.report = control_write, report_read
    _guard.channel = socket.socket(fileno=os.dup(control_write))
    # Yama's ptrace_scope=1 lets only an ancestor read /proc/<tid>/mem: name the helper.
    _libc.prctl(seccomp.PR_SET_PTRACER, _guard.helper.pid, 0, 0, 0)
    return None


def _forget_in_child() -> None:
    """A forked child has no supervisor: it starts unguarded."""
    global _guard
    inherited = (_guard.control, _guard.report)
    if _guard.channel is not None:
        with contextlib.suppress(OSError):
            _guard.channel.close()
    _guard = _Guard()
    from ..._engine import _scheduler

    _scheduler.thread_starter = _thread.start_new_thread
    _scheduler.engine_starter = _thread.start_new_thread
    _scheduler.engine_turns = None
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
