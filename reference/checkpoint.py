"""A checkpoint manager whose retention survives NFS silly renames (seed 002).

Layout of a checkpoint root::

    <root>/step_<N>/         one directory per checkpoint, filled by the caller's writer
    <root>/metadata.json     the sidecar: one record per complete checkpoint
    <root>/latest            the pointer: "step_<N>", the newest durable checkpoint
    <root>/.metadata.lock    the sidecar lock (flock, sent to the server's NLM on NFS)

A save marks its step in flight, fills the directory (the writer fsyncs its
files), fsyncs the directory, and only then, under the sidecar lock, records
the checkpoint in the sidecar and moves the pointer: a reader that follows
``latest`` never finds a checkpoint still being written.  The pointer is a
file replaced atomically rather than the seed's symlink: one rename, and no
symlink lookup for the NFS client to cache.

Cleanup keeps the latest checkpoint, the newest ``keep_last_n - 1`` complete
ones before it, everything newer than the latest and everything in flight,
and removes the rest through ``reference.fs.remove_tree``.  On NFS, a
checkpoint written a moment earlier may still have a file open on this host
(an async writer closes late): unlinking it leaves ``.nfsXXXX`` in the
directory, and ``rmtree`` fails with ENOTEMPTY, EBUSY or ENOENT until the
close lands (seed 002, its issue #527).  The removals of one cleanup share
the waits 0.05, 0.1, 0.2 and 0.4 s (at most 0.75 s of sleep per cleanup,
since every rank waits for it at a barrier); each attempt holds the sidecar
lock, the waits do not.  A directory that outlasts them is reported, and the
next cleanup retries it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .fs import (
    RemovalReport,
    RetryBudget,
    StrPath,
    atomic_write,
    ensure_dir,
    fsync_directory,
    iter_reports,
    list_entries,
    remove_tree,
)

SIDECAR = "metadata.json"
POINTER = "latest"
LOCK = ".metadata.lock"
STEP_NAME = re.compile(r"^step_(\d+)$")
# The seed-002 fix: a cleanup sleeps at most 0.05 + 0.1 + 0.2 + 0.4 = 0.75 s.
DEFAULT_WAITS = (0.05, 0.1, 0.2, 0.4)

Writer = Callable[[Path], None]
"""Fills a checkpoint directory; returns once its files are durable (fsynced)."""

logger = logging.getLogger(__name__)


class SidecarError(ValueError):
    """metadata.json holds something other than the sidecar this manager writes."""


class CheckpointOrderError(ValueError):
    """A save's step is not after the latest and every in-flight checkpoint."""


def step_name(step: int) -> str:
    return f"step_{step}"


def write_files(files: Mapping[str, bytes]) -> Writer:
    """A writer that writes each file and fsyncs it before closing it."""

    def write(directory: Path) -> None:
        for name, data in files.items():
            with open(directory / name, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())

    return write


class SidecarLock:
    """The lock every sidecar amendment, pointer move and removal attempt holds.

    Two layers: a ``threading.Lock`` for the threads of this process (the
    caller and the async writers), and ``flock`` on ``.metadata.lock`` for
    other processes and hosts.  Linux NFS sends flock to the server's lock
    manager as a whole-file lock (nfs(5), ``local_lock=none``), so it holds
    across hosts.  The lock file is opened for each acquisition and closed on
    release, which drops the flock.
    """

    def __init__(self, path: StrPath) -> None:
        self.path = Path(path)
        self._threads = threading.Lock()
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether some thread of this process holds the lock now."""
        return self._fd is not None

    def __enter__(self) -> SidecarLock:
        self._threads.acquire()
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            self._threads.release()
            raise
        self._fd = fd
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                os.close(fd)
        finally:
            self._threads.release()


def _sleep(seconds: float) -> None:
    # Looked up at each call, so a patched time.sleep (the simulation) is used.
    time.sleep(seconds)


class CheckpointManager:
    """Saves checkpoints under ``root`` and keeps the last ``keep_last_n``.

    Args:
        root: the checkpoint root; created if missing.
        keep_last_n: complete checkpoints to keep, the latest included (>= 1).
        waits: the retry waits one cleanup shares among all its removals.
        warn: where a removal that failed is reported (default: this module's
            logger); the next cleanup retries it.
        sleep: how a retry waits (default ``time.sleep``).

    Raises:
        ValueError: ``keep_last_n`` < 1, or a negative wait.
    """

    def __init__(self, root: StrPath, *, keep_last_n: int,
                 waits: tuple[float, ...] = DEFAULT_WAITS,
                 warn: Callable[[str], None] | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        if keep_last_n < 1:
            raise ValueError(f"keep_last_n must be >= 1, not {keep_last_n!r}: the latest "
                             "checkpoint is always kept")
        if any(wait < 0 for wait in waits):
            raise ValueError(f"waits must be >= 0 seconds, not {waits!r}")
        self.root = Path(root)
        self.keep_last_n = keep_last_n
        self.waits = tuple(waits)
        self._warn = warn if warn is not None else logger.warning
        self._sleep = sleep if sleep is not None else _sleep
        ensure_dir(self.root)
        self.lock = SidecarLock(self.root / LOCK)
        self.reports: list[RemovalReport] = []  # every removal this manager attempted
        self._in_flight: set[int] = set()
        self._pending: list[threading.Thread] = []
        self._errors: list[BaseException] = []

    def directory(self, step: int) -> Path:
        return self.root / step_name(step)

    # -- saving ------------------------------------------------------------------

    def save(self, step: int, write: Writer) -> Path:
        """Write checkpoint ``step`` now; returns once it is durable and cleaned up after.

        Raises:
            CheckpointOrderError: ``step`` is not after the latest and in-flight steps.
        """
        directory = self._begin(step)
        self._write_and_commit(step, write)
        return directory

    def save_async(self, step: int, write: Writer) -> None:
        """Write checkpoint ``step`` in a background thread; ``wait()`` collects it.

        The thread commits the checkpoint and runs the cleanup itself once
        the writer returns; until then the step is in flight and no cleanup
        removes it.

        Raises:
            CheckpointOrderError: as ``save``, raised here rather than in the thread.
        """
        self._begin(step)
        thread = threading.Thread(target=self._save_in_background, args=(step, write),
                                  name=f"checkpoint-writer-{step_name(step)}")
        self._pending.append(thread)
        thread.start()

    def wait(self) -> None:
        """Wait for every async save; re-raise the first error one of them met."""
        while self._pending:
            self._pending.pop(0).join()
        if self._errors:
            error = self._errors[0]
            self._errors.clear()
            raise error

    def _save_in_background(self, step: int, write: Writer) -> None:
        try:
            self._write_and_commit(step, write)
        except Exception as error:  # handed to wait(); the thread ends
            self._errors.append(error)

    def _begin(self, step: int) -> Path:
        if step < 0:
            raise CheckpointOrderError(f"step must be >= 0, not {step!r}")
        with self.lock:
            latest = self._read_latest()
            newest = max([-1 if latest is None else latest, *self._in_flight])
            if step <= newest:
                raise CheckpointOrderError(
                    f"cannot save {step_name(step)}: steps must increase, and "
                    f"{step_name(newest)} is already latest or in flight")
            self._in_flight.add(step)
        directory = self.directory(step)
        try:
            ensure_dir(directory)
        except BaseException:
            with self.lock:
                self._in_flight.discard(step)
            raise
        return directory

    def _write_and_commit(self, step: int, write: Writer) -> None:
        directory = self.directory(step)
        try:
            write(directory)
            # The writer fsynced its files; these make their names durable,
            # and the directory's own entry in the root.
            fsync_directory(directory)
            fsync_directory(self.root)
            with self.lock:
                records = self._read_records()
                records[step] = {"step": step, "directory": step_name(step)}
                self._write_records(records)
                latest = self._read_latest()
                if latest is None or step > latest:
                    atomic_write(self.root / POINTER, f"{step_name(step)}\n".encode())
                self._in_flight.discard(step)
        except BaseException:
            with self.lock:
                self._in_flight.discard(step)
            raise
        self.cleanup()

    # -- reading -----------------------------------------------------------------

    def latest(self) -> int | None:
        """The step the pointer names, read under the sidecar lock; None before any save."""
        with self.lock:
            return self._read_latest()

    def records(self) -> dict[int, dict[str, Any]]:
        """The sidecar's records by step, read under the sidecar lock.

        Raises:
            SidecarError: metadata.json is not the sidecar this manager writes.
        """
        with self.lock:
            return self._read_records()

    def checkpoints(self) -> list[int]:
        """Steps of the checkpoint directories under the root, oldest first."""
        return sorted(step for step, _ in self._scan())

    def prunable(self) -> list[str]:
        """The names a cleanup would remove now (what earlier cleanups left)."""
        with self.lock:
            return self._plan()

    def _read_latest(self) -> int | None:
        try:
            with open(self.root / POINTER, encoding="utf-8") as handle:
                text = handle.read().strip()
        except FileNotFoundError:
            return None
        match = STEP_NAME.match(text)
        if match is None:
            raise SidecarError(f"{self.root / POINTER} holds {text!r}, not 'step_<N>'")
        return int(match.group(1))

    def _read_records(self) -> dict[int, dict[str, Any]]:
        path = self.root / SIDECAR
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return {}
        try:
            entries = json.loads(data)["checkpoints"]
            return {int(entry["step"]): dict(entry) for entry in entries}
        except (ValueError, KeyError, TypeError) as error:
            raise SidecarError(f"{path} is not a checkpoint sidecar ({error}): "
                               f"{data[:80]!r}") from None

    def _write_records(self, records: Mapping[int, dict[str, Any]]) -> None:
        payload = {"checkpoints": [records[step] for step in sorted(records)]}
        atomic_write(self.root / SIDECAR,
                     (json.dumps(payload, indent=1, sort_keys=True) + "\n").encode())

    # -- cleaning up -------------------------------------------------------------

    def cleanup(self) -> list[RemovalReport]:
        """Remove the checkpoints retention no longer keeps; report, never raise, failures.

        The removals share one ``RetryBudget``; each attempt holds the sidecar
        lock, the waits do not.  Removed checkpoints leave the sidecar in one
        amendment; a directory that could not be removed is warned about and
        left for the next cleanup.
        """
        with self.lock:
            names = self._plan()
        reports = self._remove([self.root / name for name in names])
        removed = {Path(report.path).name for report in reports if report.removed}
        if removed:
            with self.lock:
                records = self._read_records()
                kept = {step: record for step, record in records.items()
                        if step_name(step) not in removed}
                if kept != records:
                    self._write_records(kept)
        for line in iter_reports(reports):
            self._warn(line)
        self.reports.extend(reports)
        return reports

    def _plan(self) -> list[str]:
        """Names to remove, oldest first; the caller holds the sidecar lock.

        Only checkpoints older than the latest are candidates: the latest
        stays, and a newer directory is in flight (here or in another
        process) or a save a crash cut short, which a later cleanup removes
        once the pointer has passed it.  Nothing is removed before the first
        durable save.
        """
        latest = self._read_latest()
        if latest is None:
            return []
        complete = set(self._read_records())
        older = sorted((step, name) for step, name in self._scan()
                       if step < latest and step not in self._in_flight)
        kept: set[int] = set()
        if self.keep_last_n > 1:
            kept = {step for step, _ in older if step in complete}
            kept = set(sorted(kept)[-(self.keep_last_n - 1):])
        return [name for step, name in older if step not in kept]

    def _scan(self) -> list[tuple[int, str]]:
        """(step, name) of each checkpoint directory; ``.nfs`` leftovers and temps are not.

        A sidecar or pointer replaced while this host held it open stays as
        ``.nfsXXXX`` beside it (seed 002, issue #531); ``list_entries`` keeps
        it apart, and only ``step_<N>`` names are checkpoints.
        """
        found = []
        for name in list_entries(self.root).entries:
            match = STEP_NAME.match(name)
            if match is not None:
                found.append((int(match.group(1)), name))
        return found

    def _remove(self, paths: Iterable[Path]) -> list[RemovalReport]:
        """Remove each path with ``remove_tree``, all drawing on one budget."""
        budget = RetryBudget(waits=self.waits)
        return [remove_tree(path, budget=budget, attempt_lock=self._attempt_lock,
                            sleep=self._sleep) for path in paths]

    def _attempt_lock(self) -> contextlib.AbstractContextManager[object]:
        return self.lock
