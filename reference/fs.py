"""Filesystem primitives that stay correct on NFS, in plain os/pathlib/time code.

Every function here runs unchanged on a local disk, on a real NFS mount and
inside a simfs world.  Each docstring says which NFS behaviour it exists for;
the facts are those of docs/design.md, "The NFS model", and docs/nfs-facts.md,
measured on a Linux 6.1 NFSv3 client.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

StrPath = str | os.PathLike[str]

# What the Linux client names a silly-renamed file: ".nfs" + 24 hex digits
# (16 of file id, 8 of a per-client counter), e.g. .nfs000000000000008900000001.
SILLY_NAME = re.compile(r"^\.nfs[0-9a-fA-F]{8,}$")


# -- seeing what another host made --------------------------------------------


def _open_directory(path: Path) -> bool:
    """Open and close a directory; False if it does not exist (or is not one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    os.close(fd)
    return True


def revalidate(path: StrPath) -> None:
    """Make this host's NFS client re-check the directories above ``path``.

    The client caches "not found" (a negative dentry) until the parent
    directory's cached attributes expire, acdirmin (30 s) after its first
    lookup.  Opening a directory sends a GETATTR whatever the cache says
    (close-to-open), and a changed directory drops its cached entries.  When
    the parent itself may not exist yet (a step directory the other host
    recreates for every broadcast), its open fails from the cached negative
    entry without asking the server; opening the grandparent is what clears
    that, after which the parent is opened again.  ENOENT is ignored.
    """
    parent = Path(path).parent
    if not _open_directory(parent):
        _open_directory(parent.parent)
        _open_directory(parent)



def revalidate_ancestors(path: StrPath) -> None:
    """``revalidate`` for a path whose missing directories may be several levels deep.

    A host that looked ``data/tokenized/x`` up before ``data`` existed holds
    a negative entry for ``data`` in its parent, so neither the parent nor
    the grandparent of ``x`` opens.  Open the nearest directory above that
    does open (a GETATTR that drops its stale entries, docs/nfs-facts.md,
    "Attribute and dentry caches"), then each one below it in turn, each looked
    up afresh.  When the parent opens at once this is one open, as
    ``revalidate``.
    """
    above = list(Path(path).parents)  # nearest first
    depth = next((i for i, directory in enumerate(above) if _open_directory(directory)), None)
    if depth is None:
        return
    for directory in reversed(above[:depth]):
        if not _open_directory(directory):
            return

def marker_exists(path: StrPath) -> bool:
    """``exists()`` that sees a file another host created within one check.

    A bare ``Path.exists()`` can answer "no" for ~30 s after another host
    created the file (seed 000); revalidating first costs up to three
    directory opens (GETATTRs) and makes the answer current.
    """
    revalidate(path)
    return os.path.exists(path)


def wait_for_path(path: StrPath, *, timeout: float, poll: float = 0.1) -> None:
    """Wait until ``path`` exists, revalidating the directories on every poll.

    Raises:
        TimeoutError: ``path`` did not appear within ``timeout`` seconds; the
            message names the path and the time waited.
        ValueError: a negative timeout or a non-positive poll interval.
    """
    _check_wait(timeout, poll)
    start = time.monotonic()
    while True:
        if marker_exists(path):
            return
        waited = time.monotonic() - start
        if waited >= timeout:
            raise TimeoutError(f"{os.fspath(path)!r} did not appear within {timeout:g} s "
                               f"(waited {waited:.2f} s)")
        time.sleep(min(poll, timeout - waited))


async def wait_for_path_async(path: StrPath, *, timeout: float, poll: float = 0.1) -> None:
    """``wait_for_path`` for trio code; each check runs in a worker thread.

    The check does blocking filesystem I/O (up to three opens and a stat,
    each a round trip to the server), so it goes through
    ``trio.to_thread.run_sync`` rather than stalling the event loop.

    Raises:
        TimeoutError: as ``wait_for_path``.
    """
    import trio

    _check_wait(timeout, poll)
    start = trio.current_time()
    while True:
        if await trio.to_thread.run_sync(marker_exists, path):
            return
        waited = trio.current_time() - start
        if waited >= timeout:
            raise TimeoutError(f"{os.fspath(path)!r} did not appear within {timeout:g} s "
                               f"(waited {waited:.2f} s)")
        await trio.sleep(min(poll, timeout - waited))


def _check_wait(timeout: float, poll: float) -> None:
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, not {timeout!r}")
    if poll <= 0:
        raise ValueError(f"poll must be > 0 seconds, not {poll!r}")


def ensure_dir(path: StrPath) -> None:
    """``mkdir -p`` that trusts the server's EEXIST over a stale cached "absent".

    ``os.makedirs(exist_ok=True)`` answers EEXIST from mkdir by checking
    ``isdir()``, which a stale negative entry can deny: the directory another
    host just made "exists and does not exist".  Revalidating before the
    re-check settles it.

    Raises:
        FileExistsError: something that is not a directory holds the name.
    """
    target = Path(path)
    if target.parent != target and not _open_directory(target.parent):
        ensure_dir(target.parent)
    try:
        os.mkdir(target)
    except FileExistsError:
        revalidate(target / "_")
        if not target.is_dir():
            raise


# -- writing and listing -------------------------------------------------------


def writer_unique_name(path: StrPath) -> str:
    """A temp name beside ``path`` no other writer can pick: host, pid, random.

    A fixed temp name (``path + ".tmp"``) collides when two hosts, or two
    processes of one host, write the same file at once (seed 004).
    """
    target = Path(path)
    return (f".{target.name}.{socket.gethostname()}.{os.getpid()}."
            f"{uuid.uuid4().hex[:12]}.tmp")


def fsync_directory(path: StrPath) -> None:
    """fsync a directory so a rename or create in it is durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: StrPath, data: bytes) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new, never a mix.

    Writes a writer-unique temp file in the same directory, fsyncs it,
    renames it over ``path`` and fsyncs the directory.  A reader on this host
    that still holds the old file open keeps reading it: the client
    silly-renames it to ``.nfsXXXX`` until that reader closes (seed 002,
    issue #531), which ``list_entries`` tells apart from real entries.
    """
    target = Path(path)
    temp = target.with_name(writer_unique_name(target))
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    fsync_directory(target.parent)


@dataclass(frozen=True)
class Listing:
    """A directory's names, with NFS silly-rename leftovers kept apart."""

    entries: tuple[str, ...]
    nfs_leftovers: tuple[str, ...]


def list_entries(path: StrPath) -> Listing:
    """List a directory, separating ``.nfsXXXX`` leftovers from real entries.

    A ``.nfs`` file is an unlinked file some process on this host still holds
    open; it is not data, it disappears at the last close, and a cleanup or a
    "which checkpoints exist" scan must not mistake it for one.
    """
    names = sorted(os.listdir(path))
    return Listing(tuple(name for name in names if not SILLY_NAME.match(name)),
                   tuple(name for name in names if SILLY_NAME.match(name)))


# -- removing ------------------------------------------------------------------


@dataclass
class RetryBudget:
    """The retry waits of one logical cleanup, shared by all its removals.

    The seed-002 fix: waits of 0.05, 0.1, 0.2 and 0.4 s, at most 0.75 s of
    sleep per cleanup however many directories keep failing, because every
    rank waits for the cleanup at a barrier.
    """

    waits: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    used: int = 0
    slept: float = 0.0

    def next_wait(self) -> float | None:
        """The next wait, or None when the budget is spent."""
        if self.used >= len(self.waits):
            return None
        wait = self.waits[self.used]
        self.used += 1
        return wait

    @property
    def total(self) -> float:
        return sum(self.waits)


# Removal errors a silly-renamed file causes while its writer has not closed
# it: ENOTEMPTY (rmdir beside .nfsXXXX), EBUSY (unlink of a busy .nfsXXXX),
# ENOENT (the .nfsXXXX vanished between listing and unlink).
TRANSIENT_REMOVAL_ERRORS = frozenset({errno.ENOTEMPTY, errno.EBUSY, errno.ENOENT})


@dataclass
class RemovalReport:
    """What ``remove_tree`` did: removed or not, how many tries, what failed."""

    path: str
    removed: bool
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    slept: float = 0.0


def remove_tree(path: StrPath, *, budget: RetryBudget,
                attempt_lock: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
                sleep: Callable[[float], None] = time.sleep) -> RemovalReport:
    """Remove a directory tree, retrying the errors NFS silly renames cause.

    ENOTEMPTY, EBUSY and ENOENT while the directory still exists are retried
    with waits drawn from ``budget``; each attempt runs under
    ``attempt_lock()``, the waits do not (so other writers of the sidecar are
    not held up).  ENOENT once the directory is gone is success, not retried.
    Any other error is tried once.  Failures are reported, never raised: a
    directory that outlasts the budget is left for the next cleanup.
    """
    target = os.fspath(path)
    report = RemovalReport(target, removed=False)
    while True:
        report.attempts += 1
        try:
            with attempt_lock():
                shutil.rmtree(target)
        except OSError as error:
            report.errors.append(_describe_error(error))
            if not os.path.lexists(target):
                report.removed = True
                return report
            if error.errno not in TRANSIENT_REMOVAL_ERRORS:
                return report
            wait = budget.next_wait()
            if wait is None:
                return report
            sleep(wait)
            budget.slept += wait
            report.slept += wait
        else:
            report.removed = True
            return report


def _describe_error(error: OSError) -> str:
    name = errno.errorcode.get(error.errno or 0, str(error.errno))
    return f"{name}: {error.filename}" if error.filename else name


def iter_reports(reports: list[RemovalReport]) -> Iterator[str]:
    """One line per directory a cleanup could not remove, for a warning."""
    for report in reports:
        if not report.removed:
            yield (f"could not remove {report.path} after {report.attempts} attempts "
                   f"({'; '.join(report.errors)}); the next cleanup retries it")
