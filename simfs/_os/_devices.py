"""A simulated host's /dev/null, /dev/zero, /dev/random and /dev/urandom.

Programs open them as files: ``open(os.devnull, "w")`` to silence output
(tqdm, logging, ``contextlib.redirect_stdout``), ``/dev/urandom`` for
random bytes, ``/dev/zero`` for zeros.  Each host answers them itself,
as the kernel's memory devices behave (drivers/char/mem.c, random.c): a
write is swallowed whole, a read of null is the end of the file, of zero
zeros, of random and urandom the process's seeded random bytes (those
``os.urandom`` gives, so a seed still fixes every byte).  ``stat`` shows the
character devices with their numbers (Documentation/admin-guide/devices.txt:
1,3 null; 1,5 zero; 1,8 random; 1,9 urandom).

Only ``open()`` and the path queries are answered: ``os.open`` of a device
needs a descriptor the simulation does not make, and is refused as any path
outside the export is, but for ``/dev/null``, whose descriptor is a read-only
real one with writes swallowed (``_machinefiles.MachineFiles._open_null``).
"""

from __future__ import annotations

import io
import os
import stat
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .._engine._scheduler import Process

DEVICES: Final = {"/dev/null": (1, 3), "/dev/zero": (1, 5), "/dev/random": (1, 8),
                  "/dev/urandom": (1, 9)}
DEVTMPFS_DEV: Final = os.makedev(0, 5)


class Device:
    """``_proc.answer``'s "open" answer for a device: which one."""

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        self.path = path


def stat_of(path: str) -> os.stat_result:
    """The device node: crw-rw-rw- root root, its major and minor as rdev."""
    if path == "/dev":
        return os.stat_result((stat.S_IFDIR | 0o755, 1, DEVTMPFS_DEV, 2, 0, 0, 0, 0, 0, 0))
    major, minor = DEVICES[path]
    return os.stat_result((stat.S_IFCHR | 0o666, 10 + minor, DEVTMPFS_DEV, 1, 0, 0, 0,
                           0, 0, 0, 0, 0, 0, 0, 0, 0, 4096, 0, os.makedev(major, minor)))


class _DeviceRaw(io.RawIOBase):
    """The raw file a device opens as: reads by kind, writes swallowed."""

    def __init__(self, process: Process, path: str, mode: str) -> None:
        super().__init__()
        self.name = path
        self.mode = mode
        self._process = process
        self._readable = "r" in mode or "+" in mode
        self._writable = bool(set(mode) & set("wax+"))

    def readable(self) -> bool:
        return self._readable

    def writable(self) -> bool:
        return self._writable

    def readinto(self, buffer: Any) -> int:
        if not self._readable:
            raise io.UnsupportedOperation("read")
        view = memoryview(buffer).cast("B")
        if self.name == "/dev/null":
            return 0
        if self.name == "/dev/zero":
            view[:] = bytes(len(view))
        else:
            view[:] = self._process.group_random().randbytes(len(view))
        return len(view)

    def write(self, data: Any) -> int:
        if not self._writable:
            raise io.UnsupportedOperation("write")
        return memoryview(data).nbytes

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return 0  # the memory devices' llseek leaves the position at 0 (mem.c, random.c)

    def tell(self) -> int:
        return 0


def open_device(process: Process, device: Device, mode: str, buffering: int,
                encoding: str | None, errors: str | None, newline: str | None) -> Any:
    """``open(device, mode, ...)``, buffered and decoded as ``open()`` would."""
    if "x" in mode:
        raise FileExistsError(17, os.strerror(17), device.path)
    raw = _DeviceRaw(process, device.path, mode.replace("t", ""))
    if buffering == 0:
        if "b" not in mode:
            raise ValueError("can't have unbuffered text I/O")
        return raw
    reading, writing = raw.readable(), raw.writable()
    buffered: Any
    if reading and writing:
        buffered = io.BufferedRandom(raw)
    elif writing:
        buffered = io.BufferedWriter(raw)
    else:
        buffered = io.BufferedReader(raw)
    if "b" in mode:
        return buffered
    text = io.TextIOWrapper(buffered, encoding or "utf-8", errors, newline,
                            line_buffering=buffering == 1)
    text.mode = mode  # type: ignore[misc]  # open() sets it on the wrapper too
    return text
