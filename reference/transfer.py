"""Parallel staged transfers into a tree shared over NFS (seed 003).

The seed ran five transfers at once to hide a 240 ms round trip; one of them
wrote ``config.json`` into a directory that another one (the weights' tar
pipe) created as a side effect, and lost the race with ENOENT.  On NFS a
retry "once the other transfer is done" can fail again from a host that
looked the directory up while it was missing: its cached negative entry is
trusted until the parent's attributes expire, up to acdirmin
(docs/nfs-facts.md, "Attribute and dentry caches").

This module never depends on another transfer having made a directory:

- every file's parent is created explicitly with ``reference.fs.ensure_dir``,
  which trusts the server's EEXIST over a stale cached "absent";
- every file is written to a writer-unique temp beside its destination,
  checked against its manifest (size and BLAKE3 of the bytes received),
  fsynced and renamed into place, so no reader ever sees a torn file under
  the final name;
- orderings that matter are declared (``Artefact.depends_on``), never
  implied by who creates what;
- failures that a retry can cure (a stale handle, a link that dropped, a
  truncated stream) are retried a bounded number of times, then reported
  with every error seen;
- ``verify`` is the seed's ``ls -lh`` done right: it reads every file back
  through ``open()`` and compares its size and BLAKE3 digest.

Plain ``os``/``pathlib``/``threading`` code: it runs unchanged on a local
disk, on a real NFS mount and inside a simfs world.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import blake3

from .fs import StrPath, ensure_dir, fsync_directory, revalidate_ancestors, writer_unique_name

_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_READ_SIZE = 1 << 20


class TransferError(Exception):
    """Base class of this module's errors."""


class PlanError(TransferError, ValueError):
    """The artefacts cannot be transferred as declared (names, paths, dependencies)."""


class StreamMismatch(TransferError):
    """The bytes a source delivered are not the ones its manifest describes."""


class TransferFailed(TransferError):
    """A file could not be put in place within the retry budget."""

    def __init__(self, artefact: str, path: str, attempts: int, errors: Sequence[str]) -> None:
        self.artefact = artefact
        self.path = path
        self.attempts = attempts
        self.errors = tuple(errors)
        super().__init__(f"artefact {artefact!r}: {path} not transferred after {attempts} "
                         f"attempt(s): {'; '.join(errors)}")


# -- what is transferred --------------------------------------------------------------


@dataclass(frozen=True)
class FileEntry:
    """One file of an artefact: its path under the destination root, size and digest.

    Raises:
        PlanError: an absolute path or one that climbs out of the root, a
            negative size, or a digest that is not 64 lowercase hex digits.
    """

    path: str
    size: int
    blake3: str

    def __post_init__(self) -> None:
        pure = PurePosixPath(self.path)
        if not self.path or pure.is_absolute() or ".." in pure.parts or pure.name in ("", "."):
            raise PlanError(f"file path {self.path!r} must be a relative path to a file "
                            "inside the destination root")
        if self.size < 0:
            raise PlanError(f"file {self.path!r}: size must be >= 0, not {self.size!r}")
        if not _DIGEST.match(self.blake3):
            raise PlanError(f"file {self.path!r}: blake3 must be 64 lowercase hex digits, "
                            f"not {self.blake3!r}")

    @classmethod
    def of(cls, path: str, data: bytes) -> FileEntry:
        """The manifest entry of ``data`` to be stored at ``path``."""
        return cls(path, len(data), blake3.blake3(data).hexdigest())


@dataclass(frozen=True)
class Artefact:
    """A named set of files transferred together, after the artefacts it depends on."""

    name: str
    files: tuple[FileEntry, ...]
    depends_on: tuple[str, ...] = ()


# The link: the bytes of one file of one artefact, as they arrive.
Source = Callable[[Artefact, FileEntry], Iterable[bytes]]


def check_plan(artefacts: Sequence[Artefact]) -> list[Artefact]:
    """The artefacts in an order that respects ``depends_on``.

    Raises:
        PlanError: a duplicate artefact name, two files with one destination,
            a dependency on an unknown artefact, or a dependency cycle.
    """
    by_name: dict[str, Artefact] = {}
    owners: dict[str, str] = {}
    for artefact in artefacts:
        if artefact.name in by_name:
            raise PlanError(f"artefact name {artefact.name!r} appears twice")
        by_name[artefact.name] = artefact
        for entry in artefact.files:
            key = str(PurePosixPath(entry.path))
            if key in owners:
                raise PlanError(f"{key} is a file of both {owners[key]!r} and "
                                f"{artefact.name!r}")
            owners[key] = artefact.name
    for artefact in artefacts:
        for dependency in artefact.depends_on:
            if dependency not in by_name:
                raise PlanError(f"artefact {artefact.name!r} depends on {dependency!r}, which "
                                f"is not being transferred; artefacts: {', '.join(by_name)}")
    ordered: list[Artefact] = []
    state: dict[str, str] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = " -> ".join((*chain[chain.index(name):], name))
            raise PlanError(f"dependency cycle: {cycle}")
        state[name] = "visiting"
        for dependency in by_name[name].depends_on:
            visit(dependency, (*chain, name))
        state[name] = "done"
        ordered.append(by_name[name])

    for artefact in artefacts:
        visit(artefact.name, ())
    return ordered


# -- retries ----------------------------------------------------------------------------

# Errors a second attempt can cure: a handle the server no longer knows
# (ESTALE), a directory a stale cache or a concurrent cleanup made vanish
# (ENOENT: the next attempt creates it again), a transient I/O error, and
# the link dropping.  Anything else (EACCES, ENOSPC, a file where a
# directory should be) fails at once.
RETRYABLE_ERRNOS = frozenset({errno.ENOENT, errno.ESTALE, errno.EIO, errno.ETIMEDOUT,
                              errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE})


@dataclass(frozen=True)
class Retry:
    """Waits between attempts of one file: ``len(waits) + 1`` attempts in all.

    Raises:
        ValueError: a negative wait.
    """

    waits: tuple[float, ...] = (1.0, 2.0, 4.0)

    def __post_init__(self) -> None:
        if any(wait < 0 for wait in self.waits):
            raise ValueError(f"retry waits must be >= 0 seconds, not {self.waits!r}")


def _retryable(error: BaseException) -> bool:
    if isinstance(error, StreamMismatch | ConnectionError):
        return True
    return isinstance(error, OSError) and error.errno in RETRYABLE_ERRNOS


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and error.errno is not None:
        name = errno.errorcode.get(error.errno, str(error.errno))
        where = f" ({error.filename})" if error.filename else ""
        return f"{name}{where}"
    return f"{type(error).__name__}: {error}"


# -- one file, one artefact --------------------------------------------------------------


@dataclass
class FileReport:
    """How one file went: attempts made and the errors that caused retries."""

    path: str
    attempts: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class ArtefactReport:
    """How one artefact went: ``done``, ``failed`` (with the error) or ``skipped``."""

    name: str
    status: str = "pending"
    files: list[FileReport] = field(default_factory=list)
    error: str | None = None


def _write_staged(target: Path, entry: FileEntry, chunks: Iterable[bytes]) -> None:
    """One attempt: parent, temp, stream, check, fsync, rename, directory fsync."""
    # Explicit, and tolerant of a stale negative entry for the parent that
    # this host cached while another transfer had not made it yet.
    ensure_dir(target.parent)
    temp = target.with_name(writer_unique_name(target))
    try:
        hasher = blake3.blake3()
        received = 0
        with open(temp, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                hasher.update(chunk)
                received += len(chunk)
            digest = hasher.hexdigest()
            if received != entry.size or digest != entry.blake3:
                raise StreamMismatch(f"{entry.path}: received {received} bytes with blake3 "
                                     f"{digest[:16]}..., the manifest says {entry.size} bytes "
                                     f"with {entry.blake3[:16]}...")
            handle.flush()
            os.fsync(handle.fileno())
        # The final name appears only now, complete: a reader on any host
        # sees no file or the whole file, never a torn one.
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_directory(target.parent)


def transfer_file(root: StrPath, artefact: Artefact, entry: FileEntry, source: Source, *,
                  retry: Retry = Retry(), sleep: Callable[[float], None] = time.sleep
                  ) -> FileReport:
    """Put one file in place under ``root``, staged and checked, retrying what can be.

    Raises:
        TransferFailed: the retries ran out, or an error no retry cures;
            the message names the artefact, the file and every error seen.
    """
    target = Path(root) / entry.path
    report = FileReport(entry.path)
    waits = iter(retry.waits)
    while True:
        report.attempts += 1
        try:
            _write_staged(target, entry, source(artefact, entry))
            return report
        except (OSError, TransferError) as error:
            report.errors.append(_describe(error))
            wait = next(waits, None) if _retryable(error) else None
            if wait is None:
                raise TransferFailed(artefact.name, entry.path, report.attempts,
                                     report.errors) from error
            sleep(wait)


def transfer_artefact(root: StrPath, artefact: Artefact, source: Source, *,
                      retry: Retry = Retry(), sleep: Callable[[float], None] = time.sleep
                      ) -> ArtefactReport:
    """Transfer every file of ``artefact``, one after another; failures are reported."""
    report = ArtefactReport(artefact.name)
    for entry in artefact.files:
        try:
            report.files.append(transfer_file(root, artefact, entry, source, retry=retry,
                                              sleep=sleep))
        except TransferFailed as failure:
            report.files.append(FileReport(entry.path, failure.attempts, list(failure.errors)))
            report.status, report.error = "failed", str(failure)
            return report
    report.status = "done"
    return report


# -- many artefacts at once --------------------------------------------------------------


@dataclass
class TransferReport:
    """Every artefact's report, in plan order, and what verification found."""

    artefacts: list[ArtefactReport]
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (all(report.status == "done" for report in self.artefacts)
                and not self.mismatches)


def transfer_all(root: StrPath, artefacts: Sequence[Artefact], source: Source, *,
                 max_parallel: int = 5, retry: Retry = Retry(), verify_after: bool = True,
                 sleep: Callable[[float], None] = time.sleep) -> TransferReport:
    """Transfer the artefacts in parallel, each after those it depends on.

    An artefact starts as soon as every artefact it declares in
    ``depends_on`` is done; one whose dependency failed is skipped, not
    started.  Nothing relies on another artefact having created a directory.
    With ``verify_after`` the files of the artefacts that are done are read
    back and checked.

    Raises:
        PlanError: as ``check_plan``.
        ValueError: ``max_parallel`` below 1.
    """
    if max_parallel < 1:
        raise ValueError(f"max_parallel must be >= 1, not {max_parallel!r}")
    ordered = check_plan(artefacts)
    reports: dict[str, ArtefactReport] = {}
    finished = {artefact.name: threading.Event() for artefact in ordered}
    slots = threading.BoundedSemaphore(max_parallel)
    unexpected: list[BaseException] = []

    def run(artefact: Artefact) -> None:
        try:
            for dependency in artefact.depends_on:
                finished[dependency].wait()
            blocked = [d for d in artefact.depends_on if reports[d].status != "done"]
            if blocked:
                reports[artefact.name] = ArtefactReport(
                    artefact.name, "skipped",
                    error=f"not started: dependency {blocked[0]!r} "
                          f"{reports[blocked[0]].status}")
                return
            with slots:
                reports[artefact.name] = transfer_artefact(root, artefact, source, retry=retry,
                                                           sleep=sleep)
        except BaseException as error:  # a bug in a source: fail loudly in the caller
            unexpected.append(error)
            reports[artefact.name] = ArtefactReport(artefact.name, "failed",
                                                    error=_describe(error))
        finally:
            finished[artefact.name].set()

    # One thread per artefact, started in dependency order, at most
    # max_parallel of them transferring at once.
    threads = [threading.Thread(target=run, args=(artefact,), name=f"transfer-{artefact.name}")
               for artefact in ordered]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if unexpected:
        raise unexpected[0]
    report = TransferReport([reports[artefact.name] for artefact in artefacts])
    if verify_after:
        report.mismatches = verify(root, [a for a in artefacts
                                          if reports[a.name].status == "done"])
    return report


# -- verification ------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """A file that is not what its manifest says: missing, or wrong size or digest."""

    path: str
    problem: str


def verify(root: StrPath, artefacts: Iterable[Artefact]) -> list[Mismatch]:
    """Read every file back through ``open()`` and compare size and BLAKE3 digest.

    The directories above each file are revalidated first, so a file that
    another host renamed into place is not reported missing from this
    host's stale negative entry (docs/nfs-facts.md, "Attribute and dentry
    caches").  ``ls -lh`` checks sizes in the client's cached attributes; this
    reads the bytes.
    """
    mismatches = []
    for artefact in artefacts:
        for entry in artefact.files:
            path = Path(root) / entry.path
            revalidate_ancestors(path)
            hasher = blake3.blake3()
            size = 0
            try:
                with open(path, "rb") as handle:
                    while chunk := handle.read(_READ_SIZE):
                        hasher.update(chunk)
                        size += len(chunk)
            except FileNotFoundError:
                mismatches.append(Mismatch(entry.path, "missing"))
                continue
            digest = hasher.hexdigest()
            if size != entry.size:
                mismatches.append(Mismatch(entry.path, f"{size} bytes, the manifest says "
                                                       f"{entry.size}"))
            elif digest != entry.blake3:
                mismatches.append(Mismatch(entry.path, f"blake3 {digest}, the manifest says "
                                                       f"{entry.blake3}"))
    return mismatches
