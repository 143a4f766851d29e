"""Plain programs for the parity tests: each takes the host's mount point first.

They never import simfs: on the real backend they run as OS processes on a
real NFS mount.  Every test directory is unique per call (a real export
outlives test runs), made by ``fresh``.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path


def fresh(root: str, name: str) -> str:
    """A clean test directory under the export."""
    path = Path(root) / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return name


def create_at(root: str, relative: str, at: float, make_parent: bool = False) -> float:
    start = time.monotonic()
    time.sleep(at)
    path = Path(root) / relative
    if make_parent:
        path.parent.mkdir()
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.close(fd)
    return time.monotonic() - start


def poll(root: str, relative: str, revalidate: tuple[str, ...] = (), limit: float = 20.0,
         every: float = 0.1) -> float:
    """Seconds from the first poll until ``relative`` is seen, opening dirs first."""
    path = Path(root) / relative
    start = time.monotonic()
    while time.monotonic() - start < limit:
        for directory in revalidate:
            try:
                os.close(os.open(Path(root) / directory, os.O_RDONLY | os.O_DIRECTORY))
            except FileNotFoundError:
                pass
        if path.exists():
            return time.monotonic() - start
        time.sleep(every)
    return float("inf")


def getattr_times(root: str, relative: str, duration: float, count: Callable[[], int],
                  every: float = 0.25) -> list[float]:
    """Times (from the start) of the stats that sent a GETATTR, polling every 0.25 s."""
    path = Path(root) / relative
    start = time.monotonic()
    seen: list[float] = []
    before = count()
    while time.monotonic() - start < duration:
        path.stat()
        after = count()
        if after > before:
            seen.append(round(time.monotonic() - start, 2))
        before = after
        time.sleep(every)
    return seen


def unlink_while_open(root: str, relative: str) -> tuple[list[str], bytes, list[str]]:
    directory = Path(root) / relative
    (directory / "f").write_bytes(b"weights")
    with open(directory / "f", "rb") as handle:
        os.unlink(directory / "f")
        during = sorted(os.listdir(directory))
        data = handle.read()
    time.sleep(0.2)  # the async removal after the last close takes a few ms
    return during, data, sorted(os.listdir(directory))


def replace_while_open(root: str, relative: str) -> tuple[list[str], bytes, list[str]]:
    directory = Path(root) / relative
    (directory / "metadata.json").write_bytes(b"v1")
    with open(directory / "metadata.json", "rb") as handle:
        (directory / "tmp").write_bytes(b"v2")
        os.replace(directory / "tmp", directory / "metadata.json")
        during = sorted(os.listdir(directory))
        data = handle.read()
    time.sleep(0.2)
    return during, data, sorted(os.listdir(directory))


def hold_unlinked(root: str, relative: str, seconds: float) -> str:
    """Open a file, unlink it (a .nfs file appears), hold it, then read it."""
    directory = Path(root) / relative
    (directory / "f").write_bytes(b"held")
    handle = open(directory / "f", "rb")
    os.unlink(directory / "f")
    time.sleep(seconds)
    try:
        handle.read()
        outcome = "read"
    except OSError as error:
        outcome = errno.errorcode[error.errno or 0]
    handle.close()
    return outcome


def _rmdir_then_rmtree(directory: Path) -> tuple[str, str]:
    """What os.rmdir, then shutil.rmtree, of ``directory`` end with: removed or an errno."""
    outcomes = []
    for remove in (os.rmdir, shutil.rmtree):
        try:
            remove(directory)
            outcomes.append("removed")
        except OSError as error:
            outcomes.append(errno.errorcode[error.errno or 0])
    return outcomes[0], outcomes[1]


def remove_beside_busy(root: str, relative: str, after: float) -> tuple[str, str]:
    """rmdir, then rmtree, of a directory holding a busy .nfs file."""
    time.sleep(after)
    return _rmdir_then_rmtree(Path(root) / relative)


def remove_own_busy(root: str, relative: str) -> tuple[str, str, list[str]]:
    """The same, from the host that holds the file open."""
    directory = Path(root) / relative
    (directory / "f").write_bytes(b"held")
    with open(directory / "f", "rb"):
        os.unlink(directory / "f")
        rmdir, rmtree = _rmdir_then_rmtree(directory)
        left = sorted(os.listdir(directory))
    return rmdir, rmtree, left


def read_after_remote_replace(root: str, relative: str, wait: float) -> str:
    path = Path(root) / relative / "metadata.json"
    path.write_bytes(b"old")
    handle = open(path, "rb")
    time.sleep(wait)
    try:
        os.fstat(handle.fileno())
        handle.read()
        outcome = "read"
    except OSError as error:
        outcome = errno.errorcode[error.errno or 0]
    handle.close()
    return outcome


def replace_file(root: str, relative: str, at: float) -> None:
    time.sleep(at)
    directory = Path(root) / relative
    (directory / "new").write_bytes(b"new")
    os.replace(directory / "new", directory / "metadata.json")
