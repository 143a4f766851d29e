"""A process's mount table: which filesystem answers a path or a descriptor.

A simulated host has the NFS export, its own local disks (``/tmp``,
``/var/tmp``, the home directory and any ``World.host(local=)`` scratch
mount: each a ``Syscalls`` over a cache-less client of its own, seen by no
other host) and, under every one of them, the real machine's own files,
read-only (``_machinefiles``).  ``Mounts`` is what a route calls
(``Process.syscalls``): it picks the filesystem by the longest mount point a
path is under, as the kernel's path walk crosses into a mount, and hands the
call down; a descriptor's calls go to the filesystem that opened it.

Between two filesystems, ``rename`` and ``link`` are ``EXDEV`` (do_renameat2,
do_linkat: ``old_path.mnt != new_path.mnt``), so ``shutil.move`` copies and
unlinks; ``sendfile`` reads from one and writes to the other.
"""

from __future__ import annotations

import errno
import os
import posixpath
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import SimulationEscape, simulated_oserror
from ._dirent import SimScandirIterator
from ._files import lookup_fd
from ._machinefiles import MachineFiles, installation_roots, is_identity
from ._syscalls import Syscalls

if TYPE_CHECKING:
    from .._engine._scheduler import Process
    from .._nfs._mount import MountOptions
    from ._context import LocalMountSpec, SyscallHost, SyscallWorld
    from ._seam import Buffer, PathArg


class Mounts:
    """The syscalls of one simulated process, over every filesystem its host has."""

    def __init__(self, world: SyscallWorld, host: SyscallHost, process: Process,
                 export: Syscalls, local: Sequence[LocalMountSpec]) -> None:
        self._world = world
        self._host = host
        self._process = process
        self._export = export
        self.export = export.export
        self.export_prefix = export.export_prefix
        self._group = process.group
        self._fds = process.group.fds
        # [mount point + "/", filesystem]: at most one matches a path (local
        # mounts may not nest, nor overlap the export); a local disk's
        # syscalls are made on the process's first use of it.
        self._mounts: list[list[Any]] = [[export.export_prefix, export]]
        self._mounts += [[disk.point + "/", disk] for disk in local]
        self._local = tuple(local)
        self._machine: MachineFiles | None = None
        # A poll's two calls, bound to the export's own methods: no frame of
        # this table in between.  Measured with bench_core's cachegrind count
        # (2 hosts): 61K instructions a poll before the table, 66K through
        # it, 58K bound.
        self.sleep = export.sleep
        self.compute = export.compute
        self.cached_absent = export.cached_absent

    # -- the process and the world: the export's syscalls answer these --------

    @property
    def local_disks(self) -> tuple[LocalMountSpec, ...]:
        """The host's local disks, as ``/proc/mounts`` lists them."""
        return self._local

    @property
    def now_ns(self) -> int:
        return self._export.now_ns

    @property
    def wall_ns(self) -> int:
        return self._export.wall_ns

    @property
    def tz(self) -> str:
        return self._export.tz

    @property
    def seed(self) -> int:
        return self._export.seed

    @property
    def mount_options(self) -> MountOptions:
        return self._export.mount_options

    @property
    def host_processes(self) -> list[Process]:
        return self._export.host_processes

    def next_object_serial(self) -> int:
        return self._export.next_object_serial()

    def spawn_thread(self, target: Callable[[], object], name: str, daemon: bool) -> Process:
        return self._export.spawn_thread(target, name, daemon)

    def yield_now(self) -> None:
        self._export.yield_now()

    def block(self, waiting_on: str, deadline_ns: int | None = None) -> bool:
        return self._export.block(waiting_on, deadline_ns)

    def wake(self, process: Process) -> None:
        self._export.wake(process)

    def park(self) -> None:
        self._export.park()

    def join(self, child: Process, deadline_ns: int | None) -> None:
        self._export.join(child, deadline_ns)

    @property
    def machine(self) -> MachineFiles:
        """The real machine's files (made at the first use)."""
        if self._machine is None:
            self._machine = MachineFiles(self._world, self._host, self._process, self._names)
        return self._machine

    @property
    def _above(self) -> set[str]:
        """"/" and the directories above each mount point: the host answers
        their stat itself (``_os/_proc``); their listing mixes the real
        machine's entries with the world's mounts, and is not simulated."""
        above = {posixpath.dirname(prefix[:-1]) for prefix, _ in self._mounts}
        for directory in list(above):
            while directory != "/":
                directory = posixpath.dirname(directory)
                above.add(directory)
        return above

    def _names(self) -> str:
        return ", ".join(sorted(prefix[:-1] for prefix, _ in self._mounts))

    # -- choosing the filesystem --------------------------------------------------

    def _of_text(self, text: str) -> Syscalls | MachineFiles:
        if "/." in text or "//" in text:
            text = posixpath.normpath(text)
        probe = text + "/"
        for mount in self._mounts:
            if probe.startswith(mount[0]):
                filesystem = mount[1]
                if filesystem is self._export:
                    return filesystem
                if probe.startswith(installation_roots()):
                    # The interpreter and its packages, even under a local disk's
                    # mount point (this machine's is under /root/.pyenv).
                    return self.machine
                if not isinstance(filesystem, Syscalls):
                    filesystem = mount[1] = filesystem.syscalls(self._host, self._process)
                return filesystem  # type: ignore[no-any-return]
        return self.machine

    def _of(self, path: Any, dir_fd: int | None = None) -> Syscalls | MachineFiles:
        """The filesystem ``path`` is on (a descriptor: the one that opened it)."""
        if path.__class__ is str:
            text = path
            if text.startswith(self.export_prefix) and "/.." not in text:
                return self._export  # a poll's path: one test
        elif isinstance(path, int):
            return self._of_fd(path)
        else:
            try:
                text = os.fspath(path)
            except TypeError:
                return self._export  # the export's own error for no path
            if isinstance(text, bytes):
                text = os.fsdecode(text)
        if not text.startswith("/"):
            if dir_fd is not None:
                return self._of_fd(dir_fd)
            # Relative: the working directory's filesystem, which walks it
            # from the directory's own handle; a ".." may climb out of it.
            cwd = self._group.cwd
            return self._of_text(cwd + "/" + text if ".." in text else cwd)
        return self._of_text(text)

    def _of_fd(self, fd: int) -> Syscalls | MachineFiles:
        """The filesystem that opened ``fd`` (an unknown one: the export's EBADF).

        The hot descriptor calls below inline this: one frame fewer each.
        """
        open_file = self._fds.get(fd)
        mount = None if open_file is None else open_file.mount
        return self._export if mount is None else mount

    def _both(self, call: str, source: Any, target: Any, src_dir_fd: int | None,
              dst_dir_fd: int | None) -> Syscalls:
        first, second = self._of(source, src_dir_fd), self._of(target, dst_dir_fd)
        if isinstance(first, MachineFiles):
            raise first.refuse(call, source)
        if isinstance(second, MachineFiles):
            raise second.refuse(call, target)
        if first is not second:
            # do_renameat2 and do_linkat: another mount is EXDEV, before any lookup.
            raise simulated_oserror(errno.EXDEV, os.fspath(source), os.fspath(target))
        return first

    def _writable(self, call: str, path: Any, dir_fd: int | None = None) -> Syscalls:
        found = self._of(path, dir_fd)
        if isinstance(found, MachineFiles):
            raise found.refuse(call, path)
        return found

    def machine_readable(self, path: object) -> bool:
        """Whether a real read of ``path`` (an absolute path an audit event
        names) reads the machine's own files: under no simulated mount, and
        not the machine's identity."""
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str) or not path.startswith("/"):
            return False
        text = posixpath.normpath(path)
        return (isinstance(self._of_text(text), MachineFiles) and not is_identity(text)
                and text not in self._above)

    # -- the process and the world ----------------------------------------------------

    def owns_fd(self, fd: int) -> bool:
        return fd in self._fds

    def escape(self, what: str) -> SimulationEscape:
        return self._export.escape(what)

    def getcwd(self) -> str:
        return self._group.cwd

    def held_fds(self) -> list[int]:
        return sorted(self._fds)

    def close_all(self) -> int:
        """Process exit: the kernel closes every descriptor (no trace, no yield)."""
        descriptors = sorted(self._fds)
        for fd in descriptors:
            self._of_fd(fd).close_quietly(fd)
        self._export.close_all()
        return len(descriptors)

    # -- paths ----------------------------------------------------------------------------

    def stat(self, path: PathArg | int, *, dir_fd: int | None = None,
             follow_symlinks: bool = True) -> os.stat_result:
        return self._of(path, dir_fd).stat(path, dir_fd=dir_fd,
                                           follow_symlinks=follow_symlinks)

    def access(self, path: PathArg, mode: int, *, dir_fd: int | None = None,
               effective_ids: bool = False, follow_symlinks: bool = True) -> bool:
        return self._of(path, dir_fd).access(path, mode, dir_fd=dir_fd,
                                             effective_ids=effective_ids,
                                             follow_symlinks=follow_symlinks)

    def utime(self, path: PathArg | int, times: tuple[float, float] | None = None, *,
              ns: tuple[int, int] | None = None, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        self._writable("os.utime", path, dir_fd).utime(
            path, times, ns=ns, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    def chmod(self, path: PathArg | int, mode: int, *, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        self._writable("os.chmod", path, dir_fd).chmod(path, mode, dir_fd=dir_fd,
                                                       follow_symlinks=follow_symlinks)

    def chown(self, path: PathArg | int, uid: int, gid: int, *, dir_fd: int | None = None,
              follow_symlinks: bool = True) -> None:
        self._writable("os.chown", path, dir_fd).chown(path, uid, gid, dir_fd=dir_fd,
                                                       follow_symlinks=follow_symlinks)

    def statvfs(self, path: PathArg | int) -> os.statvfs_result:
        found = self._of(path)
        if isinstance(found, MachineFiles):
            raise found.escape(
                f"os.statvfs({path!r}): the real machine's disks differ from machine to "
                "machine; ask the export or a host's local disk")
        return found.statvfs(path)

    def truncate(self, path: PathArg | int, length: int) -> None:
        self._writable("os.truncate", path).truncate(path, length)

    def listdir(self, path: PathArg | int = ".") -> list[str] | list[bytes]:
        return self._listing("os.listdir", path).listdir(path)

    def scandir(self, path: PathArg | int = ".") -> SimScandirIterator:
        return self._listing("os.scandir", path).scandir(path)

    def _listing(self, call: str, path: PathArg | int) -> Syscalls | MachineFiles:
        found = self._of(path)
        if isinstance(found, MachineFiles) and not isinstance(path, int):
            text = found.absolute(path)
            if text in self._above:
                raise found.escape(
                    f"{call}({path!r}): the host's root and the directories above its "
                    f"mounts ({self._names()}) are the world's, and listing them is not "
                    "simulated")
        return found

    def mkdir(self, path: PathArg, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        self._writable("os.mkdir", path, dir_fd).mkdir(path, mode, dir_fd=dir_fd)

    def rmdir(self, path: PathArg, *, dir_fd: int | None = None) -> None:
        self._writable("os.rmdir", path, dir_fd).rmdir(path, dir_fd=dir_fd)

    def unlink(self, path: PathArg, *, dir_fd: int | None = None) -> None:
        self._writable("os.unlink", path, dir_fd).unlink(path, dir_fd=dir_fd)

    def rename(self, source: PathArg, target: PathArg, *, src_dir_fd: int | None = None,
               dst_dir_fd: int | None = None) -> None:
        self._both("os.rename", source, target, src_dir_fd, dst_dir_fd).rename(
            source, target, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def link(self, source: PathArg, target: PathArg, *, src_dir_fd: int | None = None,
             dst_dir_fd: int | None = None, follow_symlinks: bool = True) -> None:
        self._both("os.link", source, target, src_dir_fd, dst_dir_fd).link(
            source, target, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd,
            follow_symlinks=follow_symlinks)

    def readlink(self, path: PathArg, *, dir_fd: int | None = None) -> str | bytes:
        return self._of(path, dir_fd).readlink(path, dir_fd=dir_fd)

    def symlink(self, target: PathArg, path: PathArg, target_is_directory: bool = False, *,
                dir_fd: int | None = None) -> None:
        self._writable("os.symlink", path, dir_fd).symlink(
            target, path, target_is_directory, dir_fd=dir_fd)

    def chdir(self, path: PathArg | int) -> None:
        self._of(path).chdir(path)

    # -- descriptors ----------------------------------------------------------------------

    def open(self, path: PathArg, flags: int, mode: int = 0o777, *,
             dir_fd: int | None = None) -> int:
        return self._of(path, dir_fd).open(path, flags, mode, dir_fd=dir_fd)

    def close(self, fd: int) -> None:
        self._of_fd(fd).close(fd)

    def close_quietly(self, fd: int) -> None:
        self._of_fd(fd).close_quietly(fd)

    def dup(self, fd: int) -> int:
        return self._of_fd(fd).dup(fd)

    def fstat(self, fd: int) -> os.stat_result:
        return self._of_fd(fd).fstat(fd)

    def read(self, fd: int, length: int) -> bytes:
        open_file = self._fds.get(fd)
        mount = None if open_file is None else open_file.mount
        return (self._export if mount is None else mount).read(fd, length)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        open_file = self._fds.get(fd)
        mount = None if open_file is None else open_file.mount
        return (self._export if mount is None else mount).pread(fd, length, offset)

    def readinto(self, fd: int, buffer: memoryview) -> int:
        open_file = self._fds.get(fd)
        mount = None if open_file is None else open_file.mount
        return (self._export if mount is None else mount).readinto(fd, buffer)

    def write(self, fd: int, data: Buffer) -> int:
        open_file = self._fds.get(fd)
        mount = None if open_file is None else open_file.mount
        return (self._export if mount is None else mount).write(fd, data)

    def pwrite(self, fd: int, data: Buffer, offset: int) -> int:
        open_file = self._fds.get(fd)
        mount = None if open_file is None else open_file.mount
        return (self._export if mount is None else mount).pwrite(fd, data, offset)

    def lseek(self, fd: int, position: int, how: int) -> int:
        return self._of_fd(fd).lseek(fd, position, how)

    def fsync(self, fd: int) -> None:
        self._of_fd(fd).fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        self._of_fd(fd).ftruncate(fd, length)

    def sendfile(self, out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        source, target = self._of_fd(in_fd), self._of_fd(out_fd)
        if source is target and not isinstance(source, MachineFiles):
            return source.sendfile(out_fd, in_fd, offset, count)
        # Across filesystems: a read from one and a write to the other, as
        # the kernel's splice through a pipe does (do_splice_direct).
        data = source.read(in_fd, count) if offset is None else source.pread(in_fd, count,
                                                                             offset)
        return target.write(out_fd, data) if data else 0

    def getfl(self, fd: int) -> int:
        # The description's own state, whatever filesystem opened it
        # (fs/fcntl.c answers F_GETFL/F_SETFL above every filesystem).
        return lookup_fd(self._fds, fd).flags

    def setfl(self, fd: int, flags: int) -> None:
        lookup_fd(self._fds, fd).set_flags(flags)

    def flock(self, fd: int, operation: int) -> None:
        self._of_fd(fd).flock(fd, operation)

    def lockf(self, fd: int, command: int, length: int = 0, start: int = 0,
              whence: int = 0) -> None:
        self._of_fd(fd).lockf(fd, command, length, start, whence)

    def copy_file_range(self, src: int, dst: int, count: int, offset_src: int | None = None,
                        offset_dst: int | None = None) -> int:
        source, target = self._of_fd(src), self._of_fd(dst)
        if isinstance(source, MachineFiles) or source is not target:
            # vfs_copy_file_range: between different filesystems, EXDEV.
            self._fds_exist(src, dst)
            raise simulated_oserror(errno.EXDEV)
        return source.copy_file_range(src, dst, count, offset_src, offset_dst)

    def _fds_exist(self, *fds: int) -> None:
        for fd in fds:
            if fd not in self._fds:
                raise simulated_oserror(errno.EBADF)

    def advise(self, fd: int, advice: int) -> None:
        self._of_fd(fd).advise(fd, advice)

    def lock_test(self, fd: int, length: int) -> bool:
        return self._of_fd(fd).lock_test(fd, length)
