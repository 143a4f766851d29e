"""Small building blocks for simfs tests: worlds, pollers, markers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from simfs import World, posix

POLL = 0.1


def create_marker(path: str, at: float) -> float:
    """Sleep until ``at``, create ``path`` with O_CREAT|O_EXCL; return the time."""
    posix.sleep(at)
    posix.close(posix.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    return posix.monotonic()


def open_dir(path: str) -> None:
    """Open a directory with O_DIRECTORY and close it; a missing one is fine."""
    try:
        posix.close(posix.open(path, os.O_RDONLY | os.O_DIRECTORY))
    except FileNotFoundError:
        pass


def poll_until_seen(path: str, *, revalidate: tuple[str, ...] = (), limit: float = 120.0
                    ) -> float:
    """Poll ``exists(path)`` every 0.1 s, opening ``revalidate`` dirs first; time seen."""
    while posix.monotonic() <= limit:
        for directory in revalidate:
            open_dir(directory)
        if posix.exists(path):
            return posix.monotonic()
        posix.sleep(POLL)
    raise TimeoutError(path)


def two_hosts(mount_b: str = "vers=3", seed: int = 0, **world: Any) -> tuple[World, Any, Any]:
    w = World(seed=seed, **world)
    return w, w.host("a"), w.host("b", mount=mount_b)


def run_alone(world: World, host: Any, fn: Callable[..., Any], *args: Any) -> Any:
    process = world.spawn(host, fn, *args)
    world.run()
    return process.result()


def errno_of(call: Callable[..., Any], *args: Any) -> int | None:
    """The errno ``call(*args)`` fails with, or None when it succeeds."""
    try:
        call(*args)
    except OSError as error:
        return error.errno
    return None


def run_apart(code: str, *options: str, **run: Any) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (``python OPTIONS -c code``), its output as text:
    for what must not happen to the test process itself (a fork, an exit)."""
    return subprocess.run([sys.executable, *options, "-c", code], capture_output=True,
                          text=True, timeout=120, check=False, **run)


SPARSE_SIZE = 64 << 30  # a sparse file's size: 64 GiB, all hole but one byte


def write_sparse_then_read_holes(path: str = "/shared/sparse"
                                 ) -> tuple[bytes, bytes, os.stat_result]:
    """Make ``path`` SPARSE_SIZE bytes with one ``x`` in the middle; read
    1 MiB of hole, the bytes around the ``x``, and the file's stat."""
    fd = posix.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    os.lseek(fd, SPARSE_SIZE // 2, os.SEEK_SET)
    posix.write(fd, b"x")
    os.ftruncate(fd, SPARSE_SIZE)
    middle = os.pread(fd, 1 << 20, SPARSE_SIZE // 4)
    around = os.pread(fd, 3, SPARSE_SIZE // 2 - 1)
    posix.close(fd)
    return middle, around, posix.stat(path)
