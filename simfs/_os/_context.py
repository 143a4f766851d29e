"""What the syscall layer needs of the world and the host it runs on.

Small Protocols instead of ``World`` and ``Host`` themselves: the OS layer
sits below the world (which builds it) and must not depend on it, so the
world is free to change anything these do not name (docs/contributing.md,
"Layers point down": layers talk down).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._engine._clock import VirtualClock
    from .._engine._scheduler import Process, Scheduler
    from .._engine._trace import Trace
    from .._errors import SimfsError
    from .._nfs._client import NfsClient
    from .._nfs._faults import FaultState
    from .._nfs._locks import LockTable
    from .._nfs._mount import MountOptions
    from ._syscalls import Syscalls


class SyscallWorld(Protocol):
    """The world-wide state a syscall touches: time, scheduling, trace, locks, faults."""

    @property
    def export(self) -> str:
        """The path every host mounts the export at."""
        ...

    @property
    def seed(self) -> int:
        """The world's seed (what a host's boot-time identities are drawn from)."""
        ...

    @property
    def tz(self) -> str:
        """The local time zone of every host (an IANA name)."""
        ...

    @property
    def _rpc_latency_ns(self) -> int:
        """Virtual nanoseconds each RPC takes."""
        ...

    @property
    def _clock(self) -> VirtualClock: ...

    @property
    def _scheduler(self) -> Scheduler: ...

    @property
    def trace(self) -> Trace: ...

    @property
    def _locks(self) -> LockTable: ...

    @property
    def _faults(self) -> FaultState | None: ...

    @property
    def _escapes(self) -> list[SimfsError]:
        """Loud failures the run re-raises even if the program caught them."""
        ...

    def _next_ofd_id(self) -> int:
        """A fresh open-file-description id (one per open(), shared by dup()s)."""
        ...

    def _next_object_serial(self) -> int:
        """A hash for an object a program keeps in a set, in the world's order."""
        ...

    def _spawn_thread(self, parent: Process, target: Callable[[], object], name: str,
                      daemon: bool) -> Process:
        """A thread started inside ``parent``'s process: same host, same descriptors."""
        ...


class SyscallHost(Protocol):
    """The machine a process runs on: its name and its NFS client."""

    @property
    def name(self) -> str: ...

    @property
    def client(self) -> NfsClient: ...

    @property
    def crashed(self) -> bool: ...

    @property
    def options(self) -> MountOptions:
        """The nfs(5) options the host mounts the export with."""
        ...

    @property
    def processes(self) -> list[Process]:
        """Every process and thread that ran on the host, in spawn order."""
        ...


class LocalMountSpec(Protocol):
    """One of a host's local disks, as the mount table and /proc/mounts need it."""

    @property
    def point(self) -> str:
        """Where it is mounted (an absolute path)."""
        ...

    @property
    def kind(self) -> str:
        """Its filesystem type, as /proc/mounts names it ("tmpfs", "ext4")."""
        ...

    @property
    def size(self) -> int:
        """Its size in bytes."""
        ...

    @property
    def dev(self) -> int:
        """Its device number (st_dev)."""
        ...

    def syscalls(self, host: Any, process: Process) -> Syscalls:
        """A process's syscalls on this disk."""
        ...
