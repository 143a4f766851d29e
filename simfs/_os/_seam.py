"""The one seam between the routes (``simfs._patch``) and the syscall layer.

A route decides only *whether* a call is simulated and hands it down; what a
call does is the syscall layer's.  Routes reach the layer through this
Protocol alone (``Process.syscalls``), so mypy checks every call a route
makes, and a renamed or re-typed syscall breaks the type check instead of a
route at run time (docs/contributing.md, "Layers point down").
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._engine._scheduler import Process
    from .._errors import SimulationEscape
    from .._nfs._mount import MountOptions
    from ._context import LocalMountSpec
    from ._dirent import SimScandirIterator

PathArg = str | bytes | os.PathLike[str] | os.PathLike[bytes]
Buffer = bytes | bytearray | memoryview


class SyscallSeam(Protocol):
    """What a simulated process's routes may call: one method per syscall."""

    # -- the process and the world --------------------------------------------

    @property
    def export(self) -> str:
        """Where the export is mounted: routes tell the host's own paths by it."""
        ...

    @property
    def export_prefix(self) -> str:
        """``export + "/"``: every path under the export starts with it."""
        ...

    def machine_readable(self, path: object) -> bool:
        """Whether a real read of ``path`` reads the machine's own files (read-only)."""
        ...

    def owns_fd(self, fd: int) -> bool:
        """Whether ``fd`` is one of this process's simulated descriptors."""
        ...

    def escape(self, what: str) -> SimulationEscape:
        """Record and return the error for code that reached outside the world."""
        ...

    def sleep(self, seconds: float) -> None:
        """time.sleep: a yield point that lets virtual time pass."""
        ...

    def compute(self, seconds: float) -> None:
        """simfs.compute: the process works ``seconds`` of virtual time, then yields."""
        ...

    def getcwd(self) -> str:
        """The working directory, as the process last set it."""
        ...

    # -- time, waiting and the host, for the routes that are not syscalls -------

    @property
    def now_ns(self) -> int:
        """Virtual nanoseconds since the world began (the monotonic clocks)."""
        ...

    @property
    def wall_ns(self) -> int:
        """Nanoseconds since the Unix epoch on the world's clock: ``time.time_ns()``."""
        ...

    @property
    def tz(self) -> str:
        """The world's time zone (an IANA name), the local time of every host."""
        ...

    @property
    def seed(self) -> int:
        """The world's seed."""
        ...

    @property
    def mount_options(self) -> MountOptions:
        """The nfs(5) options the process's host mounts the export with."""
        ...

    @property
    def local_disks(self) -> tuple[LocalMountSpec, ...]:
        """The host's local disks (``/tmp``, ``/var/tmp``, home, scratch mounts)."""
        ...

    @property
    def host_processes(self) -> list[Process]:
        """Every process and thread of the process's host, in spawn order."""
        ...

    def next_object_serial(self) -> int:
        """A hash for an object the program keeps in a set, drawn in the world's order."""
        ...

    def spawn_thread(self, target: Callable[[], object], name: str, daemon: bool) -> Process:
        """Start a thread of this process (same host, same descriptors)."""
        ...

    def yield_now(self) -> None:
        """A yield point: let another runnable process run at this instant."""
        ...

    def block(self, waiting_on: str, deadline_ns: int | None = None) -> bool:
        """Park until woken (True) or until ``deadline_ns`` passes (False)."""
        ...

    def wake(self, process: Process) -> None:
        """Make a blocked ``process`` runnable at the current instant."""
        ...

    def park(self) -> None:
        """Hand the baton on during teardown and come back when resumed."""
        ...

    def join(self, child: Process, deadline_ns: int | None) -> None:
        """Wait until the thread ``child`` ends, or until ``deadline_ns`` passes."""
        ...

    # -- paths ------------------------------------------------------------------

    def stat(self, path: PathArg | int, *, dir_fd: int | None = None,
             follow_symlinks: bool = True) -> os.stat_result:
        """os.stat (a descriptor: os.fstat)."""
        ...

    def cached_absent(self, path: str) -> bool:
        """Whether a stat of ``path`` is "absent" from the caches (then made here).

        Only for a str under the export (its prefix, no ``..``): the export's
        own method answers it, with no mount table in between.
        """
        ...

    def access(self, path: PathArg, mode: int, *, dir_fd: int | None = None,
               effective_ids: bool = False, follow_symlinks: bool = True) -> bool:
        """os.access: whether the path resolves."""
        ...

    def utime(self, path: PathArg | int, times: tuple[float, float] | None = None, *,
              ns: tuple[int, int] | None = None, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        """os.utime."""
        ...

    def chmod(self, path: PathArg | int, mode: int, *, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        """os.chmod (a descriptor: os.fchmod)."""
        ...

    def chown(self, path: PathArg | int, uid: int, gid: int, *, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        """os.chown (a descriptor: os.fchown)."""
        ...

    def statvfs(self, path: PathArg | int) -> os.statvfs_result:
        """os.statvfs (a descriptor: os.fstatvfs)."""
        ...

    def truncate(self, path: PathArg | int, length: int) -> None:
        """os.truncate."""
        ...

    def listdir(self, path: PathArg | int = ".") -> list[str] | list[bytes]:
        """os.listdir: opens the directory (close-to-open), then READDIRPLUS."""
        ...

    def scandir(self, path: PathArg | int = ".") -> SimScandirIterator:
        """os.scandir."""
        ...

    def mkdir(self, path: PathArg, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        """os.mkdir."""
        ...

    def rmdir(self, path: PathArg, *, dir_fd: int | None = None) -> None:
        """os.rmdir."""
        ...

    def unlink(self, path: PathArg, *, dir_fd: int | None = None) -> None:
        """os.unlink and os.remove."""
        ...

    def rename(self, source: PathArg, target: PathArg, *, src_dir_fd: int | None = None,
               dst_dir_fd: int | None = None) -> None:
        """os.rename and os.replace."""
        ...

    def link(self, source: PathArg, target: PathArg, *, src_dir_fd: int | None = None,
             dst_dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
        """os.link."""
        ...

    def readlink(self, path: PathArg, *, dir_fd: int | None = None) -> str | bytes:
        """os.readlink (bytes for a bytes path)."""
        ...

    def symlink(self, target: PathArg, path: PathArg, target_is_directory: bool = False, *,
                dir_fd: int | None = None) -> None:
        """os.symlink."""
        ...

    def chdir(self, path: PathArg | int) -> None:
        """os.chdir (a descriptor: os.fchdir)."""
        ...

    # -- descriptors ------------------------------------------------------------

    def open(self, path: PathArg, flags: int, mode: int = 0o777, *,
             dir_fd: int | None = None) -> int:
        """os.open."""
        ...

    def close(self, fd: int) -> None:
        """os.close."""
        ...

    def close_quietly(self, fd: int) -> None:
        """Close without a trace entry or a yield (a file object collected late)."""
        ...

    def dup(self, fd: int) -> int:
        """os.dup."""
        ...

    def fstat(self, fd: int) -> os.stat_result:
        """os.fstat."""
        ...

    def read(self, fd: int, length: int) -> bytes:
        """os.read."""
        ...

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        """os.pread."""
        ...

    def readinto(self, fd: int, buffer: memoryview) -> int:
        """RawIOBase.readinto of a simulated file."""
        ...

    def write(self, fd: int, data: Buffer) -> int:
        """os.write."""
        ...

    def pwrite(self, fd: int, data: Buffer, offset: int) -> int:
        """os.pwrite."""
        ...

    def lseek(self, fd: int, position: int, how: int) -> int:
        """os.lseek."""
        ...

    def fsync(self, fd: int) -> None:
        """os.fsync and os.fdatasync."""
        ...

    def ftruncate(self, fd: int, length: int) -> None:
        """os.ftruncate."""
        ...

    def sendfile(self, out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        """os.sendfile between two simulated descriptors."""
        ...

    def getfl(self, fd: int) -> int:
        """fcntl(fd, F_GETFL): the open file description's access mode and status flags."""
        ...

    def setfl(self, fd: int, flags: int) -> None:
        """fcntl(fd, F_SETFL, flags): set the status flags Linux lets change."""
        ...

    def flock(self, fd: int, operation: int) -> None:
        """fcntl.flock."""
        ...

    def lockf(self, fd: int, command: int, length: int = 0, start: int = 0,
              whence: int = 0) -> None:
        """fcntl.lockf."""
        ...

    def copy_file_range(self, src: int, dst: int, count: int, offset_src: int | None = None,
                        offset_dst: int | None = None) -> int:
        """os.copy_file_range between two simulated files."""
        ...

    def advise(self, fd: int, advice: int) -> None:
        """os.posix_fadvise with an access-pattern hint."""
        ...

    def close_all(self) -> int:
        """Process exit: the kernel closes every descriptor (no trace, no yield)."""
        ...

    def held_fds(self) -> list[int]:
        """The simulated descriptors the process holds, lowest first."""
        ...

    def lock_test(self, fd: int, length: int) -> bool:
        """os.lockf(F_TEST): whether another process write-locks the range."""
        ...
