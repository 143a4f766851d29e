"""The POSIX syscall layer of one simulated process, over its host's NFS client.

Every call here is one syscall: it resolves paths under the export, lets the
fault plan act, performs its effect through the host's ``NfsClient`` (the
only place NFS semantics live), records one trace event with the RPCs it
sent, and then yields to the scheduler.  The patched ``os``, ``io`` and
``fcntl`` functions of ``simfs._patch`` are thin routes to these methods.
"""

from __future__ import annotations

import errno
import operator
import os
import posixpath
import stat as stat_mod
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .._engine._clock import NS_PER_S, seconds_to_ns
from .._errors import SimulationEscape, errno_name, simulated_oserror
from .._nfs import _client as nfs
from .._nfs._delegations import RecallDelay
from .._nfs._server import EXPORT_DEV, Attrs
from ._dircalls import DirectoryCalls
from ._dirent import stat_result, statvfs_result
from ._fileio import FileCalls, PathArg
from ._files import OpenFile, lookup_fd
from ._namei import check_path_length, path_text

if TYPE_CHECKING:
    from .._engine._scheduler import Process
    from .._nfs._mount import MountOptions
    from ._context import SyscallHost, SyscallWorld

T = TypeVar("T")

# Each sleep length seen -> (the trace's outcome text, "1s", and its length in
# ns): a sleep loop records one event per sleep, and sharing the string keeps
# each event small and skips the conversion.
_SLEEPS: dict[float, tuple[str, int]] = {}


# Export -> {absolute path as written -> (normalized, components)}.  Only
# absolute paths are stored, and their resolution depends on the export
# alone, so every process of every world on that export shares one table:
# a thousand pollers of one marker keep one entry, not a thousand (each in
# its own cache lines, issue 16's many-host polls).
_RESOLVED: dict[str, dict[str | bytes, tuple[str, tuple[str, ...]]]] = {}


def _resolved_under(export: str) -> dict[str | bytes, tuple[str, tuple[str, ...]]]:
    if export not in _RESOLVED and len(_RESOLVED) >= 64:
        _RESOLVED.clear()  # worlds on many exports (a strategy drawing them)
    return _RESOLVED.setdefault(export, {})


# (uid_t)-1: what chown(2) reads as "leave it as it is".
_KEEP_ID = (1 << 32) - 1


def _owner_id(value: object, name: str) -> int | None:
    """A uid or gid as CPython's ``_Py_Uid_Converter`` takes it; None to keep.

    Raises:
        TypeError: not an integer (``uid should be integer, not str``).
        OverflowError: out of uid_t's range, worded as CPython words it.
    """
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} should be integer, not {type(value).__name__}") from None
    if number in (-1, _KEEP_ID):
        return None
    if 0 <= number < _KEEP_ID:
        return number
    if number >= 1 << 63:  # beyond a C long (measured on 3.11-3.13)
        raise OverflowError(f"{name} is greater than maximum")
    raise OverflowError(f"{name} is less than minimum")


def _with_last_marker(written: str, components: list[str]) -> list[str]:
    """``components``, with a marker for a trailing slash or a final "." of
    the path as written (normpath dropped it; the walk needs it)."""
    if not written.endswith(("/", "/.")) and written != ".":
        return components
    stripped = written.rstrip("/")
    if stripped == "." or stripped.endswith("/."):
        return [*components, nfs.LAST_DOT]
    return [*components, nfs.LAST_SLASH] if stripped else components


def _named(path: object) -> object:
    """The path an error names: none for a call on a descriptor."""
    return None if isinstance(path, int) else path


def _describe(result: object) -> str:
    """The outcome column of the trace for a successful call."""
    if result is None:
        return "ok"
    if isinstance(result, bool | int):
        return str(result)
    if isinstance(result, bytes):
        return f"{len(result)}B"
    if isinstance(result, os.stat_result):
        if stat_mod.S_ISLNK(result.st_mode):
            return f"link {result.st_size}B"
        return "dir" if result.st_mode & 0o040000 else f"file {result.st_size}B"
    if isinstance(result, list):
        return f"{len(result)} entries"
    if isinstance(result, str):
        return result  # a lock call's own account: "LOCK_EX granted"
    return "ok"


class Syscalls(FileCalls, DirectoryCalls):
    """The syscalls of one simulated process (threads share their process's fds)."""

    def __init__(self, world: SyscallWorld, host: SyscallHost, process: Process, *,
                 local: tuple[str, nfs.NfsClient, int] | None = None) -> None:
        """The export's syscalls; with ``local`` (mount point, client, device
        number), a local disk's of the host, whose descriptors name it."""
        self._world = world
        self._host = host
        self._process = process
        mount, client, self._dev = (world.export, host.client, EXPORT_DEV) if local is None \
            else local
        self._client = client
        self._scheduler = world._scheduler
        self._clock = world._clock
        self._trace = world.trace  # read per call: one attribute, not the world's property
        self._fds: dict[int, OpenFile] = process.group.fds
        self._group = process.group
        self._export = mount
        self.export = mount
        self.export_prefix = mount + "/"
        self._mount_parts = [part for part in mount.split("/") if part]
        # Components under the mount: the same for every host's disk at that point.
        self._resolved = _resolved_under(mount)
        # What its descriptors carry (OpenFile.mount): None for the export.
        self._mount_ref: Syscalls | None = None if local is None else self
        writeback = client.writeback
        self._writebacks = None if writeback is None else writeback.queue
        # World(store=)'s block store, whose free blocks are found between calls.
        self._store = client.server.store

    # -- the shape of every call ---------------------------------------------

    def _run(self, op: str, shown: str, effect: Callable[[], T], path: object = None,
             path2: object = None) -> T:
        """One syscall: faults, effect, trace event, yield.

        ``path``/``path2`` are the arguments as the program passed them: an
        error names them exactly as the real call would (``os.fspath`` of
        them, not the normalized path the trace shows); a call on a
        descriptor passes none, and its error names no file, as on Linux.
        """
        process = self._process
        if process._kill is not None:
            raise process._kill
        process._last_call = (op, shown)
        # While the call runs the watchdog reads the process's thread's CPU
        # clock: a long call is work, not a wait on something real
        # (Scheduler._busy_in_call).
        process._in_call = True
        try:
            client = self._client
            writebacks = self._writebacks
            if (writebacks is not None and writebacks.next_ns is not None
                    and writebacks.next_ns <= self._clock.now_ns):
                writebacks.run_due(self._clock.now_ns)
            store = self._store
            if store is not None and store.collect_due:
                store.collect()  # no call is half done here (BlockStore.collect)
            record = client.begin_call()
            try:
                faults = self._world._faults
                if faults is not None:
                    self._inject(faults.for_call(op, self._host.name, shown, self._clock.now))
                while True:
                    try:
                        result = effect()
                        break
                    except RecallDelay as delay:
                        # NFS4ERR_DELAY while another host's read delegation is
                        # recalled: nfs4_delay sleeps, then the call goes again.
                        self._scheduler.sleep_running(process, delay.wait_ns)
            except OSError as error:
                if error.filename is None and path is not None:
                    error.filename = os.fspath(path)  # type: ignore[call-overload]
                    if path2 is not None:
                        error.filename2 = os.fspath(path2)  # type: ignore[call-overload]
                outcome = (errno_name(error.errno) if error.errno is not None
                           else type(error).__name__)
                if getattr(error, "simfs_injected", False):
                    outcome += " (injected)"
                self._finish(op, shown, outcome, tuple(record), record.nbytes)
                raise
            self._finish(op, shown, _describe(result), tuple(record), record.nbytes)
            return result
        finally:
            process._in_call = False

    def _cached_walk(self, start: int, components: list[str], follow: bool
                     ) -> Attrs | str | None:
        """The walk's answer from the client's caches alone, where ``_run``
        would do nothing before the walk; else None (take ``_run``).

        ``_run`` first honours a kill, runs writebacks come due and asks the
        fault plan: any of them may change what the walk finds, so the
        answer from the caches stands only when none has anything to do.
        """
        writebacks = self._writebacks
        if (self._process._kill is not None or self._world._faults is not None
                or (writebacks is not None and writebacks.next_ns is not None
                    and writebacks.next_ns <= self._clock.now_ns)):
            return None
        return self._client.cached_walk(start, components, follow=follow)

    def _answered(self, op: str, shown: str, outcome: str) -> None:
        """End a call the caches answered: the event and yield ``_run`` gives
        a call that sent no RPC."""
        self._process._last_call = (op, shown)
        self._finish(op, shown, outcome, ())

    def _inject(self, rule: object) -> None:
        if rule is None:
            return
        from .._nfs._faults import FaultRule

        assert isinstance(rule, FaultRule)
        if rule.delay:
            self._scheduler.sleep(round(rule.delay * NS_PER_S))
        if rule.errno is not None:
            error = simulated_oserror(rule.errno)
            error.simfs_injected = True  # type: ignore[attr-defined]
            raise error

    def _finish(self, op: str, shown: str, outcome: str, rpcs: tuple[str, ...],
                nbytes: int = 0) -> None:
        """Record the call's event, then charge its time: ``rpc_latency`` per
        RPC and the file data its READs and WRITEs carried over the host's
        link (docs/design.md, "Data takes time"): the one place a syscall's
        RPCs cost virtual time."""
        trace = self._trace
        trace.record(self._clock.now_ns, self._host.name, self._process._name, op, shown,
                     outcome, rpcs)
        cost = len(rpcs) * self._world._rpc_latency_ns if rpcs else 0
        if nbytes:
            cost += self._client.transfer_ns(nbytes)
        if cost:
            self._scheduler.sleep_running(self._process, cost)
        else:
            self._scheduler.yield_running(self._process)

    def escape(self, what: str) -> SimulationEscape:
        """Record and return the error for code that reached outside the world."""
        error = SimulationEscape(self._process._name, self._host.name, what)
        self._world._escapes.append(error)
        return error

    def compute(self, seconds: float) -> None:
        """``simfs.compute``: the process works ``seconds`` of virtual time
        (a trace event of its own, "compute"), then yields."""
        length_ns = seconds_to_ns(seconds, "simfs.compute(seconds)")
        process = self._process
        if process._kill is not None:
            raise process._kill
        outcome = f"{seconds:g}s"
        process._last_call = ("compute", outcome)
        self._trace.record(self._clock.now_ns, self._host.name, process._name,
                           "compute", "", outcome)
        self._scheduler.sleep_running(process, length_ns)

    def sleep(self, seconds: float) -> None:
        """time.sleep: a yield point that lets virtual time pass."""
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        process = self._process
        if process._kill is not None:
            raise process._kill
        known = _SLEEPS.get(seconds)
        if known is None:
            outcome = f"{seconds:g}s"
            process._last_call = ("sleep", outcome)
            self._trace.record(self._clock.now_ns, self._host.name, process._name,
                                     "sleep", "", outcome)
            length_ns = seconds_to_ns(seconds, "sleep length")  # raises after the event
            if len(_SLEEPS) < 4096:
                _SLEEPS[seconds] = (outcome, length_ns)
        else:
            outcome, length_ns = known
            process._last_call = ("sleep", outcome)
            self._trace.record(self._clock.now_ns, self._host.name, process._name,
                                     "sleep", "", outcome)
        # The kill was honoured above: sleep_running's own check, skipped.
        self._scheduler.sleep_until_running(process, self._clock.now_ns + length_ns)

    # -- time, waiting and the host, for the routes that are not syscalls -------

    @property
    def now_ns(self) -> int:
        """Virtual nanoseconds since the world began (the monotonic clocks)."""
        return self._clock.now_ns

    @property
    def wall_ns(self) -> int:
        """Nanoseconds since the Unix epoch on the world's clock: ``time.time_ns()``."""
        return self._clock.wall_ns

    @property
    def tz(self) -> str:
        """The world's time zone (an IANA name), the local time of every host."""
        return self._world.tz

    @property
    def seed(self) -> int:
        """The world's seed."""
        return self._world.seed

    @property
    def mount_options(self) -> MountOptions:
        """The nfs(5) options the process's host mounts the export with."""
        return self._host.options

    @property
    def host_processes(self) -> list[Process]:
        """Every process and thread of the process's host, in spawn order."""
        return self._host.processes

    def next_object_serial(self) -> int:
        """A hash for an object the program keeps in a set, drawn in the world's order."""
        return self._world._next_object_serial()

    def spawn_thread(self, target: Callable[[], object], name: str, daemon: bool) -> Process:
        """Start a thread of this process (same host, same descriptors)."""
        return self._world._spawn_thread(self._process, target, name, daemon)

    def yield_now(self) -> None:
        """A yield point: let another runnable process run at this instant."""
        self._scheduler.yield_now()

    def block(self, waiting_on: str, deadline_ns: int | None = None) -> bool:
        """Park until woken (True) or until ``deadline_ns`` passes (False)."""
        return self._scheduler.block(waiting_on, deadline_ns)

    def wake(self, process: Process) -> None:
        """Make a blocked ``process`` runnable at the current instant."""
        self._scheduler.wake(process)

    def park(self) -> None:
        """Hand the baton on during teardown and come back when resumed."""
        self._scheduler.park()

    def join(self, child: Process, deadline_ns: int | None) -> None:
        """Wait until the thread ``child`` ends, or until ``deadline_ns`` passes."""
        self._scheduler.join(self._process, child, deadline_ns)

    # -- paths ------------------------------------------------------------------

    def _path(self, path: PathArg, dir_fd: int | None = None) -> tuple[str, int, list[str]]:
        """(path as shown, start file id, components under it)."""
        text = os.fspath(path)
        if dir_fd is None:
            known = self._resolved.get(text)
            if known is not None:
                return known[0], self._client.root, list(known[1])
        named = text
        text = path_text(text)
        check_path_length(text, named)
        if dir_fd is not None and not text.startswith("/"):
            base = lookup_fd(self._fds, dir_fd)
            if not base.is_dir:
                raise simulated_oserror(errno.ENOTDIR, base.path)
            # openat(2) and the other *at calls walk from the descriptor's
            # directory (its handle), as a relative path walks from the cwd.
            return self._from_base(text, base.path, base.fileid)
        elif not text.startswith("/"):
            cwd_id = self._group.cwd_id
            if cwd_id is not None:
                return self._from_base(text, self._group.cwd, cwd_id)
            text = self._group.cwd + "/" + text
        written = text
        text = posixpath.normpath(text)
        physical = self._physical(written) if "/.." in written else None
        if physical is not None:
            components: list[str] = _with_last_marker(written, physical)
        elif text == self._export:
            components = _with_last_marker(written, [])
        elif text.startswith(self.export_prefix):
            components = _with_last_marker(written, text[len(self.export_prefix):].split("/"))
        else:
            raise self.escape(f"path {text!r} is outside the export {self._export!r}")
        if dir_fd is None and written.startswith("/"):
            # Absolute paths resolve the same way every time: pollers repeat them.
            if len(self._resolved) >= 4096:
                self._resolved.clear()  # a run that named many paths; start again
            self._resolved[written] = (text, tuple(components))
        return text, self._client.root, components

    def _physical(self, written: str) -> list[str] | None:
        """The components of a path whose ``..`` climbs below the export.

        Linux climbs from the directory the walk really entered (fs/namei.c
        ``follow_dotdot``), so after a symbolic link ``link/..`` is the
        parent of its target, and ``missing/..`` is ENOENT: every name
        before a ``..`` must exist.  Folding the path lexically would make
        both the plain parent.  Returns ``[UP_FROM_START, ...]`` with the
        ``..`` kept, for the general walk; or None where folding is exact: a
        ``..`` among the machine's own directories above the export (the
        world has no links there), or one that climbs out of the export,
        which the caller judges by the folded path as before.
        """
        parts = [part for part in written.split("/") if part and part != "."]
        mount = self._mount_parts
        if parts[:len(mount)] != mount:
            return None
        below = parts[len(mount):]
        depth = 0
        for part in below:
            depth += -1 if part == ".." else 1
            if depth < 0:
                return None
        return [nfs.UP_FROM_START, *below] if ".." in below else None

    def _from_base(self, text: str, base_path: str, cwd_id: int) -> tuple[str, int, list[str]]:
        """A relative path starts at its base directory's handle (the working
        directory's, or a directory descriptor's for the *at calls), not its
        name: after another host removed it, uses are ESTALE, not ENOENT,
        even if the name exists again (docs/nfs-facts.md, "Stale handles")."""
        relative = posixpath.normpath(text)
        shown = posixpath.normpath(base_path + "/" + text)
        if ".." in text:  # _physical tells a ".." component from a name like "..x"
            # Walked from the base directory's handle (a removed one is
            # ESTALE), then down its path again, each name really entered.
            physical = self._physical(base_path + "/" + text)
            if physical is not None:
                return shown, cwd_id, _with_last_marker(text, physical)
        if relative == ".":
            return shown, cwd_id, _with_last_marker(text, [])
        if relative != ".." and not relative.startswith("../"):
            return shown, cwd_id, _with_last_marker(text, relative.split("/"))
        if shown == self._export:
            return shown, cwd_id, [nfs.UP_FROM_START]
        if not shown.startswith(self.export_prefix):
            raise self.escape(f"path {shown!r} is outside the export {self._export!r}")
        return shown, cwd_id, _with_last_marker(
            text, [nfs.UP_FROM_START, *shown[len(self.export_prefix):].split("/")])

    def _open_target(self, start: int, components: list[str]) -> Attrs:
        """The object a path names, looked up with an open intent (close-to-open)."""
        return self._resolve(start, components, intent=nfs.OPEN)

    def owns_fd(self, fd: int) -> bool:
        return fd in self._fds

    def _stat(self, attrs: Attrs) -> os.stat_result:
        # A local disk's st_blksize is its 4 KiB block (ext4, tmpfs); NFS's the wsize.
        return stat_result(attrs, self._dev, 0 if self._mount_ref is None else 4096)

    # -- metadata ---------------------------------------------------------------

    def stat(self, path: PathArg | int, *, dir_fd: int | None = None,
             follow_symlinks: bool = True) -> os.stat_result:
        if isinstance(path, int):
            return self.fstat(path)
        shown, start, components = self._path(path, dir_fd)
        # A poll's stat: answered from the caches without raising through
        # the walk, the one ENOENT raised here (issue 16).
        found = self._cached_walk(start, components, follow_symlinks)
        if found is nfs.NEGATIVE:
            self._answered("stat", shown, "ENOENT")
            raise simulated_oserror(errno.ENOENT, os.fspath(path))
        if isinstance(found, Attrs) and not self._client.writes_pending(found):
            result = self._stat(found)
            self._answered("stat", shown, _describe(result))
            return result

        def effect() -> os.stat_result:
            attrs = self._resolve(start, components, follow=follow_symlinks)
            return self._stat(self._client.stat_attrs(attrs))

        return self._run("stat", shown, effect, path)

    def cached_absent(self, path: str) -> bool:
        """Whether ``os.stat(path)`` fails with ENOENT from the caches alone;
        if so, that stat's call and event are made here, else nothing is.

        ``os.path.exists`` and ``Path.exists`` (and isfile, isdir) ask it
        first: a poll's "absent" then builds no exception only to catch it
        (issue 16).  Otherwise they stat as their bodies do.
        """
        try:
            shown, start, components = self._path(path)
        except (OSError, ValueError):
            return False  # the stat itself fails as the real one (an empty path, a NUL)
        if self._cached_walk(start, components, True) is not nfs.NEGATIVE:
            return False
        self._answered("stat", shown, "ENOENT")
        return True

    def fstat(self, fd: int) -> os.stat_result:
        open_file = self._file(fd)

        def effect() -> os.stat_result:
            self._client.flush(open_file.fileid)
            return self._stat(self._client.getattr(open_file.fileid))

        return self._run("fstat", open_file.path, effect)

    def access(self, path: PathArg, mode: int, *, dir_fd: int | None = None,
               effective_ids: bool = False, follow_symlinks: bool = True) -> bool:
        shown, start, components = self._path(path, dir_fd)
        found = self._cached_walk(start, components, follow_symlinks)
        if found is not None:
            exists = found is not nfs.NEGATIVE
            self._answered("access", shown, _describe(exists))
            return exists

        def effect() -> bool:
            try:
                self._resolve(start, components, follow=follow_symlinks)
            except FileNotFoundError:
                return False
            return True

        return self._run("access", shown, effect, path)

    def utime(self, path: PathArg | int, times: tuple[float, float] | None = None, *,
              ns: tuple[int, int] | None = None, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        if times is not None and ns is not None:
            raise ValueError("utime: you may specify either 'times' or 'ns' but not both")
        if ns is None:
            if times is None:
                now = self._clock.wall_ns
                ns = (now, now)
            else:
                ns = (round(times[0] * NS_PER_S), round(times[1] * NS_PER_S))
        atime_ns, mtime_ns = ns
        shown, target = self._target(path, dir_fd, follow_symlinks)
        self._run("utime", shown, lambda: self._set(target(), atime_ns=atime_ns,
                                                    mtime_ns=mtime_ns), _named(path))

    def chmod(self, path: PathArg | int, mode: int, *, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        shown, target = self._target(path, dir_fd, follow_symlinks)
        # A link's own mode cannot be changed: fchmodat(AT_SYMLINK_NOFOLLOW)
        # on a link is EOPNOTSUPP on Linux, which os.chmod reports as
        # NotImplementedError (CPython's posixmodule.c, os_chmod_impl).
        try:
            self._run("chmod", shown, lambda: self._set(target(), mode=mode, link_ok=False),
                      _named(path))
        except OSError as error:
            if error.errno != errno.EOPNOTSUPP or follow_symlinks:
                raise
            raise NotImplementedError(
                "chmod: follow_symlinks unavailable on this platform") from None

    def chown(self, path: PathArg | int, uid: int, gid: int, *, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        """os.chown (a descriptor: os.fchown; ``follow_symlinks=False``: os.lchown).

        A SETATTR of the owner; -1 keeps one.  The simulated processes run as
        root on a no_root_squash export, which may give any file to anyone
        (chown(2)), a symbolic link included.
        """
        owner, group = _owner_id(uid, "uid"), _owner_id(gid, "gid")
        shown, target = self._target(path, dir_fd, follow_symlinks)
        self._run("chown", shown, lambda: self._set(target(), uid=owner, gid=group),
                  _named(path))

    def statvfs(self, path: PathArg | int) -> os.statvfs_result:
        """os.statvfs (a descriptor: os.fstatvfs): one FSSTAT, every time."""
        shown, target = self._target(path, None)

        def effect() -> os.statvfs_result:
            found = target()
            counts = self._client.fsstat(found if isinstance(found, int) else found.fileid)
            if self._mount_ref is not None:  # a local disk: 4 KiB blocks
                return statvfs_result(counts, readonly=False, block_bits=12)
            return statvfs_result(counts, readonly=self._client.options.readonly)

        return self._run("statvfs", shown, effect, _named(path))

    def truncate(self, path: PathArg | int, length: int) -> None:
        if isinstance(path, int):
            self.ftruncate(path, length)
            return
        shown, target = self._target(path, None)
        self._run("truncate", shown, lambda: self._set(target(), size=length), path)

    def _target(self, path: PathArg | int, dir_fd: int | None,
                follow: bool = True) -> tuple[str, Callable[[], Attrs | int]]:
        """(shown path, a function resolving the target) for fd-or-path calls."""
        if isinstance(path, int):
            open_file = self._file(path)
            return open_file.path, lambda: open_file.fileid
        shown, start, components = self._path(path, dir_fd)
        return shown, lambda: self._resolve(start, components, follow=follow)

    def _set(self, target: Attrs | int, *, link_ok: bool = True, **changes: int | None) -> None:
        if not isinstance(target, int):
            if target.is_link and not link_ok:
                raise simulated_oserror(errno.EOPNOTSUPP)
            target = target.fileid
        fileid = target
        if self._client.options.readonly:
            raise simulated_oserror(errno.EROFS)
        size = changes.get("size")
        if size is not None and size < 0:
            raise simulated_oserror(errno.EINVAL)
        if all(value is None for value in changes.values()):
            return  # chown(-1, -1): nfs_setattr sends no SETATTR with nothing to set
        self._client.setattr(fileid, **changes)

    def getcwd(self) -> str:
        return self._group.cwd
