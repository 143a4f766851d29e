"""The world: a virtual clock, an NFS server, hosts that mount it, processes.

Everything a run does is a function of the seed (or the chooser), the code
and the fault plan: same inputs, same trace, byte for byte.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import posixpath
import random
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ._engine._clock import EPOCH_NS, VirtualClock, seconds_to_ns
from ._engine._greenlets import make_scheduler
from ._engine._modules import MAIN as MODULES_MAIN
from ._engine._modules import (
    ModuleView,
    named_target,
    newly_shared,
    own_arguments,
    shared_reason,
)
from ._engine._modules import engage as engage_modules
from ._engine._modules import own_copy as own_copy_of
from ._engine._modules import release as release_modules
from ._engine._scheduler import Process, ProcessGroup, current_process
from ._engine._trace import DEFAULT_TRACE_KEEP, Trace
from ._errors import (
    Deadlock,
    FaultPlanError,
    HostCrashed,
    ProcessFailed,
    ProcessNotFinished,
    ReplayDiverged,
    SharedModuleWarning,
    SimfsError,
)
from ._nfs._beliefs import Belief, belief
from ._nfs._client import NfsClient
from ._nfs._faults import FaultPlan, FaultState
from ._nfs._kernels import DEFAULT_KERNEL, KernelProfile, kernel_profile
from ._nfs._link import DEFAULT_LINK, parse_link
from ._nfs._localdisk import LocalClient, LocalDisk
from ._nfs._locks import LockTable
from ._nfs._mount import MountOptions
from ._nfs._pagecache import Writeback, WritebackQueue, seeded_delay
from ._nfs._server import Server
from ._nfs._serverview import ServerView
from ._nfs._store import open_store
from ._os._machine import (
    DEFAULT_ZONE,
    check_env,
    check_spawn_env,
    check_zone,
    default_environment,
    local_mounts,
    merged,
    parse_size,
)
from ._os._mounts import Mounts
from ._os._syscalls import Syscalls

Chooser = Callable[[int], int]


class Host:
    """One machine with its own NFS client (``nosharecache``: its own caches)."""

    def __init__(self, world: World, name: str, options: MountOptions, mount: str,
                 kernel: KernelProfile | None = None,
                 local: Sequence[tuple[str, str, int]] = (), link: str | None = None) -> None:
        self.world = world
        self.name = name
        self.options = options
        self.mount = mount
        self.kernel = kernel or kernel_profile(DEFAULT_KERNEL)
        self.client = NfsClient(world._server_state, world._clock, options, self.kernel)
        self.client.host_name = name
        # The host's own link as given to World.host (None: the world's).
        self.link = link
        self.client.link_bps = (world._link_bps if link is None
                                else parse_link(link, f"host {name!r}: link="))
        # Its local disks (see _nfs/_localdisk.py): mount point, type, size,
        # the client over the disk's tree, and its device number.
        # Each is made when a process first uses it (most never touch /var/tmp).
        self.local_disks = [LocalMount(world, point, kind, size, next(world._disk_numbers))
                            for point, kind, size in local]
        self.crashed = False
        self.processes: list[Process] = []
        # The client's own writeback (docs/nfs-facts.md, "Writes and data
        # visibility"): delays drawn from a generator seeded by the world's
        # seed and this host's name.
        queue = world.__dict__.setdefault("_writeback_queue", WritebackQueue())
        self.client.writeback = Writeback(
            queue, world._clock, seeded_delay(world.seed, name, self.kernel.writeback_range_s),
            lambda label, due, rpcs: world.trace.record(
                world._clock.now_ns, name, "-", "writeback", label, f"due {due:.3f} s", rpcs))
        self.client.writeback.alive = lambda: not self.crashed

    def __repr__(self) -> str:
        return f"<Host {self.name!r} mount={self.mount!r} kernel={self.kernel.release!r}>"

    def rpc_counts(self) -> Counter[str]:
        """RPCs this host's client has sent, by procedure, e.g. ``{"GETATTR": 3}``."""
        return Counter(self.client.rpcs)

    def belief(self, path: str) -> Belief:
        """What this host would answer for ``path`` now, from its caches alone."""
        normalized = posixpath.normpath(path)
        export = self.world.export
        if normalized != export and not normalized.startswith(export + "/"):
            raise ValueError(f"path {path!r} is outside the export {export!r}")
        return belief(self.client, self.name, export, normalized, self.world._clock.now_ns)


class LocalMount:
    """One local filesystem of a host: where, what, how big, and its state."""

    __slots__ = ("_client", "_world", "dev", "kind", "number", "point", "size")

    def __init__(self, world: World, point: str, kind: str, size: int, number: int) -> None:
        self._world = world
        self.point = point
        self.kind = kind
        self.size = size
        self.number = number
        self.dev = os.makedev(0, 64 + number)
        self._client: LocalClient | None = None

    @property
    def client(self) -> LocalClient:
        """The disk's tree and client, made at the first use."""
        if self._client is None:
            world = self._world
            disk = LocalDisk(world._clock, self.number, self.size, world._server_state.store)
            self._client = LocalClient(disk, world._clock)
        return self._client

    def syscalls(self, host: Host, process: Process) -> Syscalls:
        """A process's syscalls on this disk."""
        return Syscalls(self._world, host, process, local=(self.point, self.client, self.dev))


def _make_chooser(seed: int, chooser: Chooser | Sequence[int] | None) -> tuple[Chooser, bool]:
    """(choose function, whether it must run on the thread that called run())."""
    if chooser is None:
        getrandbits = random.Random(f"simfs-schedule:{seed}").getrandbits

        def draw(count: int) -> int:
            # randrange(count)'s own draw (Random._randbelow_with_getrandbits),
            # without its argument checks: the same schedule for the same
            # seed at half the cost, and a draw comes with most switches.
            bits = count.bit_length()
            choice = getrandbits(bits)
            while choice >= count:
                choice = getrandbits(bits)
            return choice

        return draw, False
    if isinstance(chooser, Sequence) and not isinstance(chooser, str):
        recorded = list(chooser)
        position = itertools.count()

        def replay(count: int) -> int:
            index = next(position)
            if index >= len(recorded):
                raise ReplayDiverged(
                    f"the recorded schedule holds {len(recorded)} choices, but the run asked "
                    f"for choice #{index + 1} (among {count}); the code or inputs changed")
            choice = recorded[index]
            if not isinstance(choice, int) or not 0 <= choice < count:
                raise ReplayDiverged(
                    f"recorded choice #{index + 1} is {choice!r}, but only {count} processes "
                    "are runnable there; the code or inputs changed")
            return choice

        return replay, False
    if callable(chooser):
        return chooser, True
    raise TypeError(
        f"chooser must be None, a callable (n) -> index, or a list of recorded choices, "
        f"not {chooser!r}")


class World:
    """A deterministic simulation of hosts sharing one NFSv3 export.

    Args:
        seed: drives every choice the world makes (schedule, temp names, trio).
        export: the path every host mounts the export at.
        chooser: who picks among simultaneously runnable processes: None (a
            ``random.Random`` seeded from ``seed``), a callable ``(n) -> index``
            (e.g. a ``simfs.strategies.schedules()`` draw), or ``world.choices`` of an
            earlier run to replay it.
        faults: a ``FaultPlan``.
        rpc_latency: virtual seconds each RPC takes (0: syscalls are instant).
        link: the rate every host's READs and WRITEs move file data at, with
            its unit: ``"10Gbit/s"`` (the default), ``"25Gbit/s"``,
            ``"1.25GB/s"``; from 1 Mbit/s to 10 Tbit/s.  A call that moves
            ``n`` bytes takes ``n * 8 / rate`` seconds more, on top of
            ``rpc_latency`` per RPC; ``w.host(..., link=)`` sets one host's.
            None: data moves in no time, as before 0.2.0.
        step_timeout: real seconds a process may run without yielding before
            it is reported as blocked on something real.
        max_events: a world whose processes pass this many scheduling events
            (syscalls, sleeps, waits, in all its runs) stops with
            ``RunawaySimulation`` naming what is still active, instead of
            filling memory: the trace holds at most about this many events
            (measured: a sleep-forever process stops at the default
            1,000,000 with a peak RSS of about 42 MB, interpreter included).
        trace_keep: how many of the latest trace events to keep readable:
            by default ``DEFAULT_TRACE_KEEP`` (100,000, about 12 MB), so a
            long run's memory stays bounded; None keeps every event.  The
            trace's digest and length always cover the whole run, and
            ``trace.format()`` says how many earlier events it no longer has.
        env: changes to the environment every simulated process starts with
            (``os.environ``; None as a value removes a variable).  The default
            is a fixed root login environment (``World.environment(host)``
            shows it), never the real one: see ``simfs/_os/_machine.py``.
        tz: the local time zone of every host (an IANA name of the machine's
            tz database, e.g. ``"Europe/Berlin"``): C's local time during a
            run, and ``TZ`` in the environment.
        per_process_modules: each spawned process imports its own copies of
            the program's pure-Python modules (those outside the standard
            library, site-packages included), as a separate interpreter
            would; its threads share them.  False: every process shares the
            test's modules, and their globals.  See docs/design.md,
            "Processes: their own modules".
        shared_modules: names of top-level packages every process shares
            even so (a pure-Python package whose objects must stay the same
            ones in every process, for example one a shared C extension
            checks against).
        store: where the server's file data lives, the export's and every
            local disk's: None (the default) keeps it in memory (a file costs
            its size in RAM once); True writes it to an unlinked file in a
            temporary directory; a path, to one in that existing directory.
            With a store, RAM holds block numbers and at most 16 MiB of
            dirty pages per file, not data: for files larger than memory.
            ``close()`` closes its file.  Invisible to the model:
            the same RPCs, trace and answers (docs/design.md, "The block
            store").  A real error under it (a full disk) stops the run with
            ``StoreError``, never a simulated error or a corrupt file.
        store_size: the most bytes the store's file may hold (an int, or
            ``"20GiB"``); refused here when the directory has less free
            space, and a run that would pass it stops with ``StoreError``.
            A block is reused once nothing refers to it (no server map, no
            host's page, stale ones included): the file holds what is live
            and up to half as much again.

    What a test reads and sets up, besides the methods below:

    - ``w.server``: the server's truth, bypassing every client cache; set up
      and inspect the export with ``mkdir``, ``write_bytes``/``write_text``,
      ``exists``, ``isdir``, ``stat``, ``listdir``, ``read_bytes``/
      ``read_text`` (no RPCs, no trace, no yield).
    - ``w.trace``: every syscall, sleep and lifecycle event of the run, with
      the RPCs each sent: ``format(limit=)``, ``select(host=, process=,
      op=)``, ``digest()`` (a sha256: same seed, same digest).
    - ``w.hosts`` (by name), ``w.processes`` (in spawn order), ``w.now``,
      ``w.choices`` (pass back as ``chooser`` to replay), ``w.seed``.

    A process that raises makes ``w.run()`` raise ``ProcessFailed`` naming
    it; ``w.run(check=False)`` leaves failures to ``Process.exception()``.

    Example::

        w = World(seed=1)
        w.server.mkdir("/shared/t")
        consumer = w.host("consumer", mount="vers=3,acdirmin=3")
        p = w.spawn(consumer, wait_for, "/shared/t/marker")
        w.run(until=60)
        p.result(); print(w.trace.format(limit=5)); print(w.explain("/shared/t/marker"))
    """

    def __init__(self, seed: int = 0, *, export: str = "/shared",
                 chooser: Chooser | Sequence[int] | None = None,
                 faults: FaultPlan | None = None, rpc_latency: float = 0.0,
                 link: str | None = DEFAULT_LINK,
                 step_timeout: float = 10.0, max_events: int = 1_000_000,
                 trace_keep: int | None = DEFAULT_TRACE_KEEP,
                 env: Mapping[str, str | None] | None = None, tz: str = DEFAULT_ZONE,
                 per_process_modules: bool = True, shared_modules: Sequence[str] = (),
                 store: str | os.PathLike[str] | bool | None = None,
                 store_size: int | str | None = None) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int >= 0, not {seed!r}")
        if seed < 0:
            # One rule for seeds everywhere: scenarios' --seed, --simfs-seed.
            raise ValueError(f"seed must be an int >= 0, not {seed!r}")
        if not export.startswith("/") or export != export.rstrip("/") or "//" in export:
            raise ValueError(f"export must be an absolute path like '/shared', not {export!r}")
        if faults is not None and not isinstance(faults, FaultPlan):
            raise TypeError(f"faults must be a FaultPlan, not {faults!r}")
        if step_timeout <= 0:
            raise ValueError(f"step_timeout must be > 0 seconds, not {step_timeout!r}")
        if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
            raise ValueError(f"max_events must be an int >= 1, not {max_events!r}")
        if not isinstance(per_process_modules, bool):
            raise TypeError(f"per_process_modules must be True or False, not "
                            f"{per_process_modules!r}")
        self._shared_modules = _check_shared_modules(shared_modules)
        block_store = open_store(store, None if store_size is None
                                 else parse_size(store_size, "World(store_size=)"))
        self._per_process_modules = per_process_modules
        self._reported_shared: set[str] = set()
        self._seed = seed
        self._export = export
        self._clock = VirtualClock(EPOCH_NS)
        self._epoch_ns = self._clock.epoch_ns
        choose, on_main = _make_chooser(seed, chooser)
        self._processes: list[Process] = []
        # The native guard (on unless SIMFS_NATIVE_GUARD=0) starts before the
        # scheduler is made: its threads (a process's, or the engine's that
        # runs them all) start filtered.
        from ._patch._guards._native_guard import status as native_guard_status

        native_guard_status()
        self._scheduler = make_scheduler(self._clock, choose, choose_on_main=on_main,
                                        step_timeout=step_timeout, max_events=max_events,
                                        processes=self._processes, on_exit=self._on_exit)
        self._server_state = Server(self._clock, store=block_store)
        self._server = ServerView(self._server_state, export)
        self._trace = Trace(keep=trace_keep)
        self._locks = LockTable(self._scheduler)
        self._hosts: dict[str, Host] = {}
        # Loud failures (escapes, runaways) re-raised by run() even if caught.
        self._escapes: list[SimfsError] = []
        if block_store is not None:  # a failed store fails the run, as an escape does
            block_store.on_failure = self._escapes.append
        self._plan = faults or FaultPlan()
        self._faults: FaultState | None = FaultState(self._plan) if faults is not None else None
        self._rpc_latency_ns = seconds_to_ns(rpc_latency, "rpc_latency")
        self._max_events = max_events
        self._link_bps = parse_link(link, "World(link=)")
        self._link = link
        self._ofd_ids = itertools.count(1)
        self._disk_numbers = itertools.count(1)
        self._pids = itertools.count(1000)
        self._object_serials = itertools.count(1)
        self._names: Counter[str] = Counter()
        self._crashes_scheduled = False
        # Processes not yet finished, or finished since the last run() looked:
        # run() reads these, not every process a long session ever made.
        self._unsettled: list[Process] = []
        self._random = random.Random(f"simfs-world:{seed}")
        self._tz = check_zone(tz)
        self._env = check_env({} if env is None else env, "World(env=)")
        # Merged once now only to refuse a bad env= (a TZ other than tz=) here,
        # at World(), rather than at the first spawn; each host merges its own.
        merged(default_environment("-", self._tz), self._env, zone=self._tz, where="World(env=)")
        # (host, process) -> what explain() said when that process failed.
        self._failure_context: dict[tuple[str, str], list[str]] = {}

    # -- what a test reads: read-only views of what the world was given and made --

    @property
    def seed(self) -> int:
        """The seed every choice of the world derives from."""
        return self._seed

    @property
    def export(self) -> str:
        """The path every host mounts the export at."""
        return self._export

    @property
    def epoch_ns(self) -> int:
        """``time.time_ns()`` inside the world at virtual time 0 (2026-01-01T00:00:00Z)."""
        return self._epoch_ns

    @property
    def server(self) -> ServerView:
        """The server's truth, bypassing every client cache (no RPCs, no trace, no yield)."""
        return self._server

    @property
    def trace(self) -> Trace:
        """Every syscall, sleep and lifecycle event of the run, with the RPCs each sent."""
        return self._trace

    @property
    def hosts(self) -> Mapping[str, Host]:
        """The hosts by name, in the order they were added (``host()`` adds one)."""
        return MappingProxyType(self._hosts)

    @property
    def processes(self) -> tuple[Process, ...]:
        """Every process and thread spawned, in spawn order."""
        return tuple(self._processes)

    @property
    def plan(self) -> FaultPlan:
        """The ``FaultPlan`` the world runs (an empty one without ``faults=``)."""
        return self._plan

    @property
    def max_events(self) -> int:
        """The scheduling-event budget ``World(max_events=)`` set for the world's lifetime."""
        return self._max_events

    @property
    def tz(self) -> str:
        """The local time zone of every host (an IANA name)."""
        return self._tz

    @property
    def link(self) -> str | None:
        """The link every host's READs and WRITEs cross, as ``World(link=)`` gave it
        (``None``: data moves in no time); a host's own ``link=`` overrides it."""
        return self._link

    @property
    def env(self) -> Mapping[str, str | None]:
        """The changes ``World(env=)`` made to every process's starting environment."""
        return MappingProxyType(self._env)

    # -- building ---------------------------------------------------------------

    def host(self, name: str, mount: str | MountOptions = "vers=3",
             kernel: str = DEFAULT_KERNEL, *,
             local: Mapping[str, int | str] | None = None, link: str | None = None) -> Host:
        """Add a host that mounts the export with nfs(5) ``mount`` options.

        Every host also has local disks of its own, seen by no other host:
        ``/tmp`` (a tmpfs), ``/var/tmp`` and the home directory (the world's
        ``HOME``, ``/root`` by default), plain POSIX filesystems with no NFS
        caches (``simfs/_nfs/_localdisk.py``).  ``rename`` and ``link``
        between two filesystems are ``EXDEV``, as on Linux.

        Args:
            name: the host's name in traces and beliefs.
            mount: nfs(5) options, e.g. ``"vers=3,acdirmin=3"``, or a parsed
                ``MountOptions`` (``MountOptions.from_proc_mounts(line)`` takes
                a whole /proc/mounts line).
            kernel: the client kernel release whose measured behaviour the
                host follows where releases differ (``"6.1"``, ``"6.12"``);
                with ``vers=4.1`` or ``vers=4.2`` in ``mount``, that
                release's NFSv4.x profile (measured for ``"6.1"``).
            local: more local disks, mount point to size in bytes or with a
                binary unit: ``{"/scratch": "4GiB"}`` (node-local scratch).
            link: this host's link to the server, e.g. ``"25Gbit/s"``, as
                ``World(link=)`` takes it; None: the world's.

        Raises:
            MountOptionError: an option simfs does not know or cannot honour.
            TypeError: ``mount`` is neither a str nor a ``MountOptions``.
            UnknownKernel: ``kernel`` is not a release simfs has measured
                (over the NFS version ``mount`` names).
            ValueError: the name is empty or already taken; a local mount
                point that overlaps the export or another local disk; a size
                that is no size; a link rate outside 1 Mbit/s to 10 Tbit/s
                or without its unit.
        """
        profile = kernel_profile(kernel)
        if not isinstance(mount, (str, MountOptions)):
            raise TypeError(f"mount must be nfs(5) options as a str, e.g. mount='vers=3' "
                            f"(Linux's defaults), or a MountOptions, not {mount!r}")
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise ValueError(f"host name must be a non-empty word, not {name!r}")
        if name in self._hosts:
            raise ValueError(f"host {name!r} already exists; hosts: {', '.join(self._hosts)}")
        home = merged(default_environment(name, self._tz), self._env, zone=self._tz,
                      where="World(env=)").get("HOME")
        disks = local_mounts(home, local, self._export)
        if isinstance(mount, MountOptions):
            options, text = mount, mount.format()
        else:
            options, text = MountOptions.parse(mount), mount
        if options.vers != "3":  # the release's NFSv4.x profile, if it was measured
            profile = kernel_profile(kernel, options.vers)
        if link is not None:
            parse_link(link, f"host {name!r}: link=")  # refused before the host exists
        host = Host(self, name, options, text, profile, disks, link)
        self._hosts[name] = host
        return host

    def _resolve_host(self, host: Host | str) -> Host:
        if isinstance(host, Host):
            if host.world is not self:
                raise ValueError(f"host {host.name!r} belongs to another world")
            return host
        found = self._hosts.get(host)
        if found is None:
            raise ValueError(f"unknown host {host!r}; hosts: {', '.join(self._hosts) or 'none'}")
        return found

    def spawn(self, host: Host | str, target: Callable[..., Any] | str, *args: Any,
              name: str | None = None, env: Mapping[str, str | None] | None = None,
              **kwargs: Any) -> Process:
        """Start ``target(*args, **kwargs)`` as a process on ``host``.

        An ``async def`` target runs under ``trio.run`` on the world's clock.

        With per-process modules (the default) the process runs ``target`` as
        found in its own copy of ``target.__module__`` when ``pickle`` would
        send it by name: a function or class defined at a module's top level
        (or a ``functools.partial`` of one); arguments that are such
        functions or classes are the process's own too.  ``target`` may also
        name a function as ``"package.module:function"``.  A closure, lambda,
        bound method or other object is the test's own, shared with the
        test's modules.

        Args:
            env: changes to the world's environment for this process only
                (None as a value removes a variable).  A target that accepts
                a keyword ``env`` itself is refused with ``env=``: pass its
                arguments with ``functools.partial``.

        Raises:
            TypeError: ``env`` is ambiguous for this target, or malformed.
            ValueError: a malformed variable, or ``TZ`` other than the world's zone,
                or a target string that names no importable module.
        """
        if isinstance(target, str):
            target = _named_target(target)
        where = self._resolve_host(host)
        if where.crashed:
            raise SimfsError(f"host {where.name!r} has crashed; nothing can start on it")
        check_spawn_env(target, env)
        changes = check_env({} if env is None else env, "spawn(env=)")
        variables = merged(self.environment(where), changes, zone=self._tz, where="spawn(env=)")
        call, own_modules = self._as_callable(target, args, kwargs)
        group = ProcessGroup(next(self._pids), self._export,
                             self._random.getrandbits(64), variables)
        if self._per_process_modules:
            # A target the test made itself (a closure, a lambda, a bound
            # method) runs with the test's modules, as it was written
            # against them; its process still has its own interpreter state.
            group.modules = ModuleView(f"pid {group.pid}",
                                       modules_of=None if own_modules else MODULES_MAIN)
        return self._add_process(where, call, self._unique_name(name or _name_of(target)),
                                 group, parent=None, daemon=False, native_id=group.pid)

    def environment(self, host: Host | str) -> dict[str, str]:
        """The environment a process spawned on ``host`` starts with (without spawn's env=)."""
        where = self._resolve_host(host)
        return merged(default_environment(where.name, self._tz), self._env, zone=self._tz,
                      where="World(env=)")

    def _spawn_thread(self, parent: Process, target: Callable[[], object], name: str,
                     daemon: bool) -> Process:
        """A thread started inside ``parent``'s process: same host, same descriptors."""
        return self._add_process(host_of(parent), target, self._unique_name(name), parent.group,
                                 parent=parent, daemon=daemon, native_id=next(self._pids))

    def _as_callable(self, target: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> tuple[Callable[[], object], bool]:
        """The process's body, and whether it runs with modules of its own."""
        if not callable(target):
            raise TypeError(f"spawn needs a callable target, not {target!r}")
        from ._patch import install
        from ._patch._registry import simulated

        # A stdlib function passed before the first run() (spawn(h, time.sleep, 3))
        # was looked up before the routes existed: run its route instead.
        install()
        target = simulated(target)
        if self._per_process_modules:
            engage_modules(self._shared_modules)
            found = own_copy_of(target)
            if found is None:
                return (lambda: _call_in_process(target, args, kwargs)), False
            arguments = own_arguments(args, kwargs)
            if arguments is not None:
                return (lambda: _call_in_process(found(), *arguments())), True
            return (lambda: _call_in_process(found(), args, kwargs)), True
        if inspect.iscoroutinefunction(target):
            from ._patch._concurrency._trio import run_async

            return (lambda: run_async(target, args, kwargs)), False
        return (lambda: target(*args, **kwargs)), False

    def _unique_name(self, name: str) -> str:
        self._names[name] += 1
        count = self._names[name]
        return name if count == 1 else f"{name}#{count}"

    def _add_process(self, host: Host, call: Callable[[], object], name: str,
                     group: ProcessGroup, parent: Process | None, daemon: bool,
                     native_id: int) -> Process:
        process = Process(self._scheduler, len(self._processes), name, host, call, group,
                          parent, daemon, native_id)
        process._syscalls = Mounts(self, host, process, Syscalls(self, host, process),
                                  host.local_disks)
        self._processes.append(process)
        self._unsettled.append(process)
        host.processes.append(process)
        group.live_threads.append(process)
        self._scheduler.add(process)
        return process

    # -- running ----------------------------------------------------------------

    @property
    def now(self) -> float:
        """Virtual seconds since the world began."""
        return self._clock.now

    @property
    def now_ns(self) -> int:
        """Virtual nanoseconds since the world began (exact: no float rounding)."""
        return self._clock.now_ns

    @property
    def choices(self) -> list[int]:
        """Every choice the chooser made, in order: pass it back as ``chooser`` to replay."""
        return list(self._scheduler.choices)

    def run(self, until: float | None = None, *, check: bool = True,
            max_events: int | None = None) -> None:
        """Run until every process has finished, or until virtual time ``until``.

        The clock stops at the last event when everything finished first, and
        at ``until`` when processes were still sleeping or waiting then.

        Args:
            until: virtual seconds to stop at; None runs until nothing can happen.
            max_events: the scheduling events this run may take, counted from
                its start, instead of the world's lifetime budget
                (``World(max_events=)``): for a session of many bounded runs
                in one world.  Later runs keep the new limit unless they pass
                their own.
            check: raise ``ProcessFailed`` when a process raised during this
                run (each failure is reported once, by the run it happened
                in).  Pass False when failures are the expected outcome and
                read them with ``Process.exception()``.  A process stopped by
                a ``HostCrash`` or by the world's teardown is not a failure.

        Raises:
            ProcessFailed: with ``check``, processes raised; names each
                process, its host and its exception.
            SimulationEscape: a process reached outside the simulation.
            BlockedOutsideSimulation: a process waits on something real.
            Deadlock: processes wait on each other and nothing can wake them.
            SimfsError: a loaded library's route could not be installed (a
                version whose entry points moved): its native I/O would go
                to the real machine (docs/libraries.md).
        """
        inside = current_process()
        if inside is not None:
            raise SimfsError(
                f"World.run() was called inside simulated process {inside.name!r}: a world "
                "cannot run inside another world's process.  If the process imported the "
                "script that builds this world, the script's top level ran again in the "
                "process's own copy of its modules (as under multiprocessing's spawn): put "
                "it under `if __name__ == \"__main__\":`, or spawn a function of a module "
                "that builds no world when imported")
        from ._patch import install, real_cwd_sentinel
        from ._patch._guards import _native_guard, _outside
        from ._patch._imports import refuse_unrouted

        install()
        refuse_unrouted()
        _native_guard.watch(self._export)
        self._schedule_crashes()
        until_ns = None if until is None else seconds_to_ns(until, "until")
        if max_events is not None:
            if isinstance(max_events, bool) or not isinstance(max_events, int) \
                    or max_events < 1:
                raise ValueError(f"max_events must be an int >= 1, not {max_events!r}")
            self._scheduler.max_events = self._scheduler.progress + max_events
        try:
            with real_cwd_sentinel(self), _outside.watching(self._export, self._escapes):
                self._scheduler.run(until_ns)
        except BaseException as error:
            self._teardown()
            # A real thread refused on the export: the process that handed it
            # work then waits for an answer that never comes, which is not
            # what went wrong.
            outside = [e for e in self._escapes if isinstance(e, _outside.RealThreadEscape)]
            if outside and isinstance(error, SimfsError):
                raise outside[0] from error
            raise
        fatal = self._scheduler.take_fatal()
        if fatal is not None:
            self._teardown()
            raise fatal
        _native_guard.drain()  # what the guard refused while it ran
        if self._escapes:
            self._teardown()
            raise self._escapes[0]
        if self._scheduler.quiescent:
            self._finish_quiescent()
        elif until_ns is not None and self._clock.now_ns < until_ns:
            self._clock.advance_to(until_ns)
        self._warn_shared_modules()
        failures = self._new_failures()
        if check and failures:
            raise ProcessFailed(failures) from failures[0][2]

    def _warn_shared_modules(self) -> None:
        if not self._per_process_modules:
            return
        shared = newly_shared(((p.name, p.group.modules) for p in self._unsettled),
                              self._reported_shared)
        for package, _process in shared:
            # One text per package, so Python's filters show it once per place.
            warnings.warn(SharedModuleWarning(
                f"simulated processes share the package {package!r}: "
                f"{shared_reason(package)}, so its module state is one object "
                "in every process, as it never is across real processes (Process."
                "shared_modules names it; docs/design.md, 'Processes: their own modules')"),
                stacklevel=3)

    def _new_failures(self) -> list[tuple[str, str, BaseException]]:
        """Processes that raised since the last run(), marked as seen."""
        failures: list[tuple[str, str, BaseException]] = []
        unsettled = []
        for process in self._unsettled:
            if not process.done:
                unsettled.append(process)
                continue
            error = process.exception()
            if error is None or isinstance(error, (HostCrashed, ProcessNotFinished)):
                continue
            failures.append((process.name, process.host.name, error))
        self._unsettled = unsettled
        return failures

    def _finish_quiescent(self) -> None:
        """Nothing can happen any more: unwind what is left, and report a deadlock.

        A thread still blocked after its process's main function returned is
        abandoned quietly (an idle pool worker); a blocked main function is a
        deadlock.
        """
        waiting = [p for p in self._unsettled if p.active]
        stuck = [p for p in waiting if p.parent is None]
        descriptions = [p.describe() for p in waiting]
        self._teardown()
        if stuck:
            raise Deadlock(descriptions)

    def explain(self, path: str) -> str:
        """Every host's belief about ``path`` beside the server's truth, one line each."""
        truth = "present" if self._server.exists(path) else "absent"
        lines = [f"{path} at {self.now:.3f} s: server says {truth}"]
        lines.extend(f"  {host.belief(path).format()} [kernel {host.kernel.release}]"
                     for host in self._hosts.values())
        if truth == "present":  # who holds locks on it, and where they are held
            lines.extend(f"  lock: {line}"
                         for line in self._locks.describe(self.server.stat(path).fileid))
        return "\n".join(lines)

    def close(self) -> None:
        """Stop every unfinished process so its OS thread ends, and close the
        block store's file (``World(store=)``), whose disk space comes back
        then; safe to call twice.  Read ``w.server``'s file data before: with
        a store it is gone after (``StoreError`` says so)."""
        self._teardown()
        store = self._server_state.store
        if store is not None:
            store.close("World.close()")

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _teardown(self) -> None:
        self._scheduler.stop_all(self._unsettled)

    # -- faults -----------------------------------------------------------------

    def _schedule_crashes(self) -> None:
        if self._crashes_scheduled:
            return
        self._crashes_scheduled = True
        unknown = self._plan.hosts() - set(self._hosts)
        if unknown:
            raise FaultPlanError(
                f"the fault plan names unknown hosts {sorted(unknown)}; hosts: "
                f"{', '.join(self._hosts) or 'none'}")
        for crash in self._plan.crashes:
            host = self._hosts[crash.host]
            self._scheduler.call_at(seconds_to_ns(crash.at, "crash time"),
                                   lambda host=host: self._crash(host))  # type: ignore[misc]

    def _crash(self, host: Host) -> None:
        """The host stops: processes end, open files stay open (``.nfs`` orphans),
        unflushed writes are lost, locks stay held (NLM keeps them until reboot;
        over v4 they lapse with its lease, not modelled: ``UnmodelledLease``)."""
        host.crashed = True
        for process in host.processes:
            self._scheduler.detach(process, f"host {host.name!r} crashed")
        host.client.lose_memory()
        self._locks.drop_local(host.name)
        if host.options.vers != "3":
            self._locks.lease_lapses(host.name)
        self._trace.record(self._clock.now_ns, host.name, "-", "crash", "", "host down")

    def _next_ofd_id(self) -> int:
        """A fresh open-file-description id (one per open(), shared by dup()s)."""
        return next(self._ofd_ids)

    def _next_object_serial(self) -> int:
        """A hash for an object a program keeps in a set (_patch/_concurrency/_threads.py)."""
        return next(self._object_serials)

    # -- process lifecycle --------------------------------------------------------

    def _on_exit(self, process: Process) -> None:
        error = process.exception()
        outcome = "ok" if error is None else type(error).__name__
        self._trace.record(self._clock.now_ns, process.host.name, process.name, "exit", "",
                          outcome)
        if error is not None and not isinstance(error, (HostCrashed, ProcessNotFinished)):
            # What the caches and the export held at the failing instant, for
            # the failure report: by the end of the run they may have moved on
            # (a silly-renamed file gone with its last close).
            from ._failure import snapshot

            self._failure_context[(process.host.name, process.name)] = snapshot(
                self, process.host.name, process.name, error)
        group = process.group
        if process in group.live_threads:
            group.live_threads.remove(process)
        if any(not p.daemon for p in group.live_threads):
            return
        # The OS process ends: daemon threads die with it, the kernel closes
        # its descriptors (flushing, and removing silly-renamed files).
        for thread in list(group.live_threads):
            self._scheduler.detach(thread, "its process exited (daemon thread)")
        group.live_threads.clear()
        if not host_of(process).crashed:
            process.syscalls.close_all()
        if group.modules is not MODULES_MAIN:
            release_modules(group.modules)


def host_of(process: Process) -> Host:
    """The ``Host`` a process runs on (the engine knows it only as a ``Placement``).

    Raises:
        TypeError: the process was not made by a ``World``.
    """
    host = process.host
    if not isinstance(host, Host):
        raise TypeError(f"process {process.name!r} runs on {host!r}, not on a simfs Host")
    return host


def _name_of(target: Callable[..., Any]) -> str:
    if isinstance(target, functools.partial):
        return _name_of(target.func)
    return getattr(target, "__name__", None) or type(target).__name__


def _call_in_process(target: Callable[..., Any], args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> object:
    """Call the process's own copy of a target (under trio if it is ``async def``),
    then its ``atexit`` handlers, as an interpreter's main thread ends."""
    from ._patch._identity._interpreter import run_exit_handlers

    try:
        if inspect.iscoroutinefunction(target):
            from ._patch._concurrency._trio import run_async

            return run_async(target, args, kwargs)
        return target(*args, **kwargs)
    finally:
        process = current_process()
        if process is not None:
            run_exit_handlers(process)


def _named_target(target: str) -> Callable[..., Any]:
    """``"package.module:function"``: the function, found in each process's own copy."""
    module_name, colon, qualname = target.partition(":")
    if (not colon or not qualname or not module_name
            or not all(part.isidentifier() for part in module_name.split("."))
            or not all(part.isidentifier() for part in qualname.split("."))):
        raise ValueError(f"spawn target {target!r} is not 'package.module:function' "
                         "(dotted identifiers around one colon)")
    import importlib.util

    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as error:
        spec = None
        reason = f": {error}"
    else:
        reason = ""
    if spec is None:
        raise ValueError(f"spawn target {target!r}: no module named {module_name!r} can be "
                         f"imported{reason}")
    return named_target(module_name, qualname)


def _check_shared_modules(names: Sequence[str]) -> frozenset[str]:
    if isinstance(names, str) or not isinstance(names, Sequence | set | frozenset):
        raise TypeError(f"shared_modules must be a sequence of module names, not {names!r}")
    for name in names:
        if not isinstance(name, str) or not all(p.isidentifier() for p in name.split(".")):
            raise ValueError(f"shared_modules: {name!r} is not a module name like 'dateutil'")
    return frozenset(names)

