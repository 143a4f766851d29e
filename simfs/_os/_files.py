"""Open file descriptions and the per-process descriptor table.

Simulated descriptors start at 2**20, above Linux's default ``nr_open``, so a
simulated descriptor that leaks into an unpatched C call fails with EBADF
instead of touching whatever real file has that number.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any, Final

from .._errors import simulated_oserror

if TYPE_CHECKING:
    from .._nfs._dirops import Pin

FD_BASE: Final = 1 << 20


class OpenFile:
    """An open file description: what ``open()`` made and ``dup()`` shares."""

    __slots__ = ("append", "fileid", "is_dir", "mount", "ofd_id", "path", "pin", "pos",
                 "readable", "refs", "sync", "writable")

    def __init__(self, fileid: int, path: str, *, readable: bool, writable: bool,
                 append: bool, sync: bool, is_dir: bool, ofd_id: int) -> None:
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
