"""Direct calls into the current simulated process's syscall layer.

Inside ``World.run()`` plain ``os``/``open``/``time`` calls are routed here
automatically; these functions are for code that wants to say explicitly
that it runs in the simulation (and for tests of the layer itself).
Outside a simulated process they raise ``SimfsError`` instead of touching
the real filesystem.
"""

from __future__ import annotations

import os
from typing import Any

from ._engine._clock import NS_PER_S
from ._engine._scheduler import current_process
from ._errors import SimfsError
from ._os._dirent import SimScandirIterator
from ._os._fileio import PathArg
from ._os._seam import SyscallSeam


def _syscalls(what: str) -> SyscallSeam:
    process = current_process()
    if process is None:
        raise SimfsError(f"simfs.posix.{what} was called outside a simulated process")
    return process.syscalls


def stat(path: PathArg | int, **kwargs: Any) -> os.stat_result:
    return _syscalls("stat").stat(path, **kwargs)


def exists(path: PathArg) -> bool:
    """``os.path.exists`` semantics: a stat that treats any OSError as absent."""
    try:
        _syscalls("exists").stat(path)
    except OSError:
        return False
    return True


def open(path: PathArg, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
    return _syscalls("open").open(path, flags, mode, **kwargs)


def read(fd: int, length: int) -> bytes:
    return _syscalls("read").read(fd, length)


def write(fd: int, data: bytes) -> int:
    return _syscalls("write").write(fd, data)


def close(fd: int) -> None:
    _syscalls("close").close(fd)


def fsync(fd: int) -> None:
    _syscalls("fsync").fsync(fd)


def fstat(fd: int) -> os.stat_result:
    return _syscalls("fstat").fstat(fd)


def listdir(path: PathArg | int) -> list[str] | list[bytes]:
    return _syscalls("listdir").listdir(path)


def scandir(path: PathArg | int) -> SimScandirIterator:
    return _syscalls("scandir").scandir(path)


def mkdir(path: PathArg, mode: int = 0o777) -> None:
    _syscalls("mkdir").mkdir(path, mode)


def rmdir(path: PathArg) -> None:
    _syscalls("rmdir").rmdir(path)


def unlink(path: PathArg) -> None:
    _syscalls("unlink").unlink(path)


def rename(source: PathArg, target: PathArg) -> None:
    _syscalls("rename").rename(source, target)


replace = rename


def link(source: PathArg, target: PathArg) -> None:
    _syscalls("link").link(source, target)


def utime(path: PathArg | int, times: tuple[float, float] | None = None) -> None:
    _syscalls("utime").utime(path, times)


def sleep(seconds: float) -> None:
    """Sleep in virtual time."""
    _syscalls("sleep").sleep(seconds)


def monotonic() -> float:
    process = current_process()
    if process is None:
        raise SimfsError("simfs.posix.monotonic was called outside a simulated process")
    return process.syscalls.now_ns / NS_PER_S
