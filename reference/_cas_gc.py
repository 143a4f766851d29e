"""Boot-time sweeps and size-capped LRU garbage collection of a shared CAS root.

A mixin of ``reference.cas.CasStore``: every name these functions remove may
be another writer's, so they act on dot names only by age (a crashed
writer's temp), never on ``.nfsXXXX`` silly renames, and never on a blob a
snapshot in use references (seed 004; docs/design.md, "The NFS model", and
docs/nfs-facts.md).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

from ._cas_model import (
    DIGEST,
    LAST_USED,
    MANIFEST,
    WRITER_TEMP,
    CasStats,
    GcReport,
    Manifest,
    sibling_name,
)
from .fs import RetryBudget, remove_tree


class Maintenance:
    """Sweeps and garbage collection over ``blobs/`` and ``snapshots/``."""

    blobs: Path
    snapshots: Path
    stale_after: float
    stats: CasStats

    def blob_path(self, digest: str) -> Path:
        raise NotImplementedError

    def snapshot_path(self, key: str) -> Path:
        raise NotImplementedError

    def sweep_stale_temps(self, *, now: float | None = None) -> list[str]:
        """At boot: remove writer temps older than ``stale_after`` (a crashed writer's).

        A live writer's temp is fresh (its heartbeat fsyncs); the mtime is
        the server's, compared with this host's clock, so hosts must agree to
        well within ``stale_after``.
        """
        now = time.time() if now is None else now
        swept = []
        for directory in (self.blobs, self.snapshots):
            for name in sorted(os.listdir(directory)):
                if not WRITER_TEMP.match(name):
                    continue
                path = directory / name
                try:
                    status = os.lstat(path)
                except FileNotFoundError:
                    continue  # its writer finished meanwhile
                if now - status.st_mtime < self.stale_after:
                    continue
                if _remove(path):
                    swept.append(f"{directory.name}/{name}")
        self.stats.swept.extend(swept)
        return swept

    def _referenced(self) -> set[str]:
        """Digests some snapshot's manifest names."""
        referenced: set[str] = set()
        for name in sorted(os.listdir(self.snapshots)):
            if name.startswith("."):
                continue
            try:
                with open(self.snapshots / name / MANIFEST, encoding="utf-8") as handle:
                    manifest = Manifest.from_json(handle.read())
            except (FileNotFoundError, NotADirectoryError, ValueError, KeyError):
                continue
            referenced.update(entry.digest for entry in manifest.entries)
        return referenced

    def _orphan_candidates(self) -> list[str]:
        """Blob names only: dot names are temps in flight and ``.nfs`` silly renames."""
        return [name for name in sorted(os.listdir(self.blobs)) if DIGEST.match(name)]

    def sweep_orphan_blobs(self, *, min_age: float = 3600.0, now: float | None = None
                           ) -> list[str]:
        """Remove blobs no snapshot references, once older than ``min_age``.

        The age spares a blob a writer published a moment ago and is about
        to link into its tree.
        """
        now = time.time() if now is None else now
        referenced = self._referenced()
        removed = []
        for name in self._orphan_candidates():
            if name in referenced:
                continue
            path = self.blobs / name
            try:
                if now - os.lstat(path).st_mtime < min_age:
                    continue
            except FileNotFoundError:
                continue
            if _remove(path):
                removed.append(name)
        return removed

    def collect_garbage(self, max_bytes: int, *, keep: Sequence[str] = (),
                        in_use_s: float = 3600.0, now: float | None = None) -> GcReport:
        """Evict least-recently-used snapshots until the blobs fit in ``max_bytes``.

        A snapshot used within ``in_use_s`` (its ``.last_used``) or named in
        ``keep`` is never evicted, so a blob a live snapshot uses is never
        removed: another host reading a removed blob gets ESTALE
        (docs/nfs-facts.md, "Stale handles").  An evicted tree is renamed to a
        dot name first (it vanishes at once), then removed; a reader on this
        host leaves ``.nfsXXXX`` behind until its last close, and the evicted
        tree with it: the next collection removes what an earlier one left (no
        writer works in an evicted tree, so its age does not matter).
        """
        now = time.time() if now is None else now
        report = GcReport()
        for name in sorted(os.listdir(self.snapshots)):
            if WRITER_TEMP.match(name) and name.endswith(".evicting"):
                removal = remove_tree(self.snapshots / name, budget=RetryBudget())
                report.errors.extend(removal.errors if not removal.removed else ())
        sizes = self._blob_sizes()
        report.bytes_before = report.bytes_after = sum(sizes.values())
        if report.bytes_before <= max_bytes:
            return report
        for used, key in self._by_last_use():
            if report.bytes_after <= max_bytes:
                break
            if key in keep or now - used < in_use_s:
                continue
            snapshot = self.snapshot_path(key)
            doomed = snapshot.with_name(sibling_name(snapshot, ".evicting"))
            try:
                os.rename(snapshot, doomed)
            except FileNotFoundError:
                continue
            report.evicted.append(key)
            removal = remove_tree(doomed, budget=RetryBudget())
            report.errors.extend(removal.errors if not removal.removed else ())
            referenced = self._referenced()
            for digest in sorted(set(sizes) - referenced):
                if _remove(self.blob_path(digest)):
                    report.removed_blobs.append(digest)
                report.bytes_after -= sizes.pop(digest)
        return report

    def _blob_sizes(self) -> dict[str, int]:
        sizes = {}
        for name in self._orphan_candidates():
            with contextlib.suppress(FileNotFoundError):
                sizes[name] = os.lstat(self.blobs / name).st_size
        return sizes

    def _by_last_use(self) -> list[tuple[float, str]]:
        found = []
        for name in sorted(os.listdir(self.snapshots)):
            if name.startswith("."):
                continue
            path = self.snapshots / name
            try:
                used = os.stat(path / LAST_USED).st_mtime
            except FileNotFoundError:
                try:
                    used = os.stat(path).st_mtime
                except FileNotFoundError:
                    continue
            found.append((used, name))
        return sorted(found)


def _remove(path: Path) -> bool:
    """Remove a file or a tree another writer may remove first; True if we did."""
    try:
        if path.is_dir() and not path.is_symlink():
            return remove_tree(path, budget=RetryBudget()).removed
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
