"""``open``/``io.open`` for simulated paths, on Python's own buffered io classes.

A simulated file is a ``RawIOBase`` whose reads and writes are syscalls of
the calling process; ``io.BufferedReader``/``Writer``/``Random`` and
``io.TextIOWrapper`` wrap it exactly as ``open()`` wraps a ``FileIO``, so
text modes, encodings, newlines and buffering behave as they do for real.
The buffer size is an NFS mount's ``st_blksize`` (1 MiB), as ``open()``
picks it for real, so a small file is written by one syscall at close.
"""

from __future__ import annotations

import builtins
import io
import os
from typing import Any

from ..._engine._scheduler import Process, current_process
from ..._os import _devices, _proc
from ..._os._seam import SyscallSeam
from .._guards import _outside
from .._registry import escape, patch

_NFS_BLKSIZE = 1 << 20


class SimRawFile(io.RawIOBase):
    """The unbuffered file of a simulated descriptor."""

    def __init__(self, process: Process, fd: int, name: object, mode: str, flags: int,
                 closefd: bool) -> None:
        super().__init__()
        self._group = process.group
        self._owner = process
        self._fd = fd
        self.name = name
        self.mode = mode
        self._closefd = closefd
        access = flags & os.O_ACCMODE
        self._readable = access in (os.O_RDONLY, os.O_RDWR)
        self._writable = access in (os.O_WRONLY, os.O_RDWR)

    def __repr__(self) -> str:
        return f"<simulated file {self.name!r} mode={self.mode!r}>"

    def _syscalls(self) -> SyscallSeam:
        process = current_process()
        if process is not None and process.group is self._group:
            return process.syscalls
        who = "outside the world" if process is None else f"in process {process.name!r}"
        raise escape(self._owner, f"file {self.name!r} opened in process "
                                  f"{self._owner.name!r} was used {who}")

    def fileno(self) -> int:
        if self.closed:  # FileIO.fileno: a closed file's number is no longer its own
            raise ValueError("I/O operation on closed file")
        process = current_process()
        if process is not None and process.group is not self._group:
            # The number means another descriptor there: a finalizer of a file
            # from an earlier world (freed in a later world's process) would
            # unlock or close that world's descriptor of the same number.
            self._syscalls()  # refuses, naming both processes
        return self._fd

    def readable(self) -> bool:
        return self._readable

    def writable(self) -> bool:
        return self._writable

    def seekable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        count: int = self._syscalls().readinto(self._fd, view)
        return count

    def readall(self) -> bytes:
        # One read syscall for the rest of the file, not one per 8 KiB.
        data: bytes = self._syscalls().read(self._fd, 1 << 62)
        return data

    def write(self, data: Any) -> int:
        written: int = self._syscalls().write(self._fd, data)
        return written

    def seek(self, position: int, whence: int = os.SEEK_SET) -> int:
        offset: int = self._syscalls().lseek(self._fd, position, whence)
        return offset

    def tell(self) -> int:
        return self.seek(0, os.SEEK_CUR)

    def truncate(self, size: int | None = None) -> int:
        if size is None:
            size = self.tell()
        self._syscalls().ftruncate(self._fd, size)
        return size

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._closefd:
                process = current_process()
                if process is not None and process.group is self._group:
                    process.syscalls.close(self._fd)
                else:
                    # Garbage collected outside its process: close it the way
                    # the kernel does at exit, without a trace entry.
                    self._owner.syscalls.close_quietly(self._fd)
        finally:
            super().close()


def _flags_for(mode: str) -> tuple[int, bool, bool]:
    """(os.open flags, text mode, updating) for an ``open()`` mode string."""
    modes = set(mode)
    if modes - set("axrwb+t") or len(mode) > len(modes):
        raise ValueError(f"invalid mode: {mode!r}")
    creating, reading = "x" in modes, "r" in modes
    writing, appending, updating = "w" in modes, "a" in modes, "+" in modes
    text, binary = "t" in modes, "b" in modes
    if text and binary:
        raise ValueError("can't have text and binary mode at once")
    if creating + reading + writing + appending != 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    if updating:
        flags = os.O_RDWR
    elif reading:
        flags = os.O_RDONLY
    else:
        flags = os.O_WRONLY
    if writing:
        flags |= os.O_CREAT | os.O_TRUNC
    elif appending:
        flags |= os.O_CREAT | os.O_APPEND
    elif creating:
        flags |= os.O_CREAT | os.O_EXCL
    return flags, not binary, updating


def _simulated_open(process: Process, file: Any, mode: str, buffering: int,
                    encoding: str | None, errors: str | None, newline: str | None,
                    closefd: bool, opener: Any) -> Any:
    flags, text, updating = _flags_for(mode)
    if not text:
        if encoding is not None:
            raise ValueError("binary mode doesn't take an encoding argument")
        if errors is not None:
            raise ValueError("binary mode doesn't take an errors argument")
        if newline is not None:
            raise ValueError("binary mode doesn't take a newline argument")
    if buffering == 0 and text:
        raise ValueError("can't have unbuffered text I/O")
    if isinstance(file, int):
        fd = file
    else:
        if not closefd:
            raise ValueError("Cannot use closefd=False with file name")
        fd = opener(file, flags) if opener is not None else process.syscalls.open(file, flags,
                                                                                  0o666)
    raw = SimRawFile(process, fd, file, mode.replace("t", ""), flags, closefd)
    try:
        line_buffering = buffering == 1
        if buffering in (1, -1):
            buffering = _NFS_BLKSIZE
        if "a" in mode:
            raw.seek(0, os.SEEK_END)
        if buffering == 0:
            return raw
        buffer: io.BufferedIOBase
        if updating:
            buffer = io.BufferedRandom(raw, buffering)
        elif raw.writable():
            buffer = io.BufferedWriter(raw, buffering)
        else:
            buffer = io.BufferedReader(raw, buffering)
        if not text:
            return buffer
        wrapper = io.TextIOWrapper(buffer, encoding, errors, newline, line_buffering)
        wrapper.mode = mode  # type: ignore[misc]
        return wrapper
    except BaseException:
        raw.close()
        raise


def install() -> None:
    real_open = io.open

    def open(file: Any, mode: str = "r", buffering: int = -1, encoding: str | None = None,
             errors: str | None = None, newline: str | None = None, closefd: bool = True,
             opener: Any = None) -> Any:
        process = current_process()
        if process is None and _outside.PREFIXES:
            _outside.check("open", file)
        if process is None or (isinstance(file, int) and not process.syscalls.owns_fd(file)
                               and file in (0, 1, 2)):
            return real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        if isinstance(file, int) and not process.syscalls.owns_fd(file):
            raise escape(process, f"open({file}) on a real file descriptor")
        if isinstance(file, float):
            raise TypeError(f"expected str, bytes or os.PathLike object, not {type(file).__name__}")
        outside = _proc.outside_export(process, file)
        if outside is not None:
            content = _proc.answer(process, "open", outside)
            if isinstance(content, str):
                return _proc.open_file(content, mode, encoding, errors, newline)
            if isinstance(content, _devices.Device):
                _flags_for(mode)  # open()'s own ValueError for a mode it refuses
                if "b" in mode and encoding is not None:
                    raise ValueError("binary mode doesn't take an encoding argument")
                return _devices.open_device(process, content, mode, buffering, encoding,
                                            errors, newline)
        return _simulated_open(process, file, mode, buffering, encoding, errors, newline,
                               closefd, opener)

    patch(io, "open", open)
    patch(builtins, "open", open)
