"""Open file descriptions and the per-process descriptor table.

Simulated descriptors start at 2**20, above Linux's default ``nr_open``, so a
simulated descriptor that leaks into an unpatched C call fails with EBADF
instead of touching whatever real file has that number.
"""

from __future__ import annotations

import errno
import os
import platform
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from .._errors import simulated_oserror

if TYPE_CHECKING:
    from .._nfs._dirops import Pin

FD_BASE: Final = 1 << 20

# The kernel's O_LARGEFILE, which open(2) adds on 64-bit Linux
# (build_open_flags: force_o_largefile()) and F_GETFL shows: glibc's
# os.O_LARGEFILE is 0 there, the kernel's bit is per architecture
# (asm-generic/fcntl.h 0o100000; arm64, powerpc and others 0o400000).
O_LARGEFILE: Final = os.O_LARGEFILE or {"aarch64": 0o400000, "arm64": 0o400000, "ppc64le": 0o400000,
                                          "ppc64": 0o400000}.get(platform.machine(), 0o100000)
# What open(2) keeps out of the open file description's flags
# (do_dentry_open clears O_CREAT, O_EXCL, O_NOCTTY, O_TRUNC; O_CLOEXEC is
# the descriptor's, not the description's).  Measured on Linux 6.18, ext4:
# os.open(path, O_WRONLY|O_APPEND|O_CREAT|O_CLOEXEC) then F_GETFL is 0o102001.
_NOT_KEPT: Final = os.O_CREAT | os.O_EXCL | os.O_NOCTTY | os.O_TRUNC | os.O_CLOEXEC
# The flags F_SETFL may change (fs/fcntl.c SETFL_MASK); FASYNC is left out:
# on a file with no fasync operation (every simulated one) setfl keeps it
# clear (measured on Linux 6.18: F_SETFL O_ASYNC, then F_GETFL shows no O_ASYNC).
SETFL_MASK: Final = (os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_DIRECT", 0)
                     | getattr(os, "O_NOATIME", 0))


def status_flags(flags: int) -> int:
    """F_GETFL's answer for a description ``open(2)`` made with ``flags``."""
    return (flags & ~_NOT_KEPT) | O_LARGEFILE


class OpenFile:
    """An open file description: what ``open()`` made and ``dup()`` shares."""

    __slots__ = ("append", "fileid", "flags", "is_dir", "mount", "ofd_id", "path", "pin", "pos",
                 "readable", "refs", "sync", "writable")

    def __init__(self, fileid: int, path: str, *, readable: bool, writable: bool,
                 append: bool, sync: bool, is_dir: bool, ofd_id: int,
                 flags: int | None = None) -> None:
        self.fileid = fileid
        self.path = path
        self.readable = readable
        self.writable = writable
        self.append = append
        self.sync = sync
        self.is_dir = is_dir
        self.pos = 0
        self.refs = 1
        self.ofd_id = ofd_id
        self.pin: Pin | None = None  # the name this open holds on its host
        # The filesystem that opened it when not the export (a local disk's
        # syscalls): its descriptor's calls go there (``_mounts``).
        self.mount: Any = None
        # F_GETFL's answer: the access mode and status flags open(2) kept.
        if flags is None:
            flags = ((os.O_RDWR if writable else os.O_RDONLY) if readable else os.O_WRONLY)
            flags |= os.O_APPEND if append else 0
        self.flags = status_flags(flags)

    def set_flags(self, flags: int) -> None:
        """F_SETFL: only the flags of ``SETFL_MASK`` change (fs/fcntl.c setfl)."""
        self.flags = (flags & SETFL_MASK) | (self.flags & ~SETFL_MASK)
        self.append = bool(self.flags & os.O_APPEND)


def allocate_fd(table: dict[int, OpenFile], open_file: OpenFile) -> int:
    """The lowest free simulated descriptor, as POSIX requires of open()."""
    fd = FD_BASE
    while fd in table:
        fd += 1
    table[fd] = open_file
    return fd


def lookup_fd(table: dict[int, OpenFile], fd: int) -> OpenFile:
    open_file = table.get(fd)
    if open_file is None:
        raise simulated_oserror(errno.EBADF)
    return open_file


F = TypeVar("F", bound=OpenFile)
T = TypeVar("T")


class DescriptorReads(Generic[F]):
    """read, pread and readinto, one shape for every filesystem's open files.

    A filesystem's calls (the export's and local disks' ``FileCalls``, the
    real machine's ``MachineFiles``) say how to find an open file, how to
    read from it and how a call is traced; the three calls are these.
    """

    def _file(self, fd: int) -> F:
        raise NotImplementedError

    def _run(self, op: str, shown: str, effect: Callable[[], T], path: object = None) -> T:
        raise NotImplementedError

    def _read(self, open_file: F, length: int, offset: int | None) -> bytes:
        raise NotImplementedError

    def read(self, fd: int, length: int) -> bytes:
        open_file = self._file(fd)
        return self._run("read", open_file.path, lambda: self._read(open_file, length, None))

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        if offset < 0:
            raise simulated_oserror(errno.EINVAL)  # ksys_pread64, before the descriptor
        open_file = self._file(fd)
        return self._run("read", open_file.path, lambda: self._read(open_file, length, offset))

    def readinto(self, fd: int, buffer: memoryview) -> int:
        open_file = self._file(fd)

        def effect() -> int:
            data = self._read(open_file, len(buffer), None)
            buffer[:len(data)] = data
            return len(data)

        return self._run("read", open_file.path, effect)
