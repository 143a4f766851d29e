"""A content-addressed model cache on a root that many writers share (seed 004).

Layout of a CAS root::

    <root>/blobs/<digest>                  one file per BLAKE3 digest (hex)
    <root>/blobs/.<digest>.<host>.<pid>.<rand>.tmp       a download in flight
    <root>/snapshots/<key>/                a materialised tree: hard links to blobs,
                                           .manifest.json, .last_used
    <root>/snapshots/.<key>.<host>.<pid>.<rand>.building  a tree being linked
    <root>/quarantine/                     corrupt bytes moved aside, for inspection

When the root is a volume several pods mount (seed 004), every name in it
may be another writer's, of any age:

- A download streams into a writer-unique temp in ``blobs/`` (host, pid and
  random bits, ``reference.fs.writer_unique_name``), hashing as it writes,
  and is published with ``link(temp, blob)``: the server refuses it with
  EEXIST if another writer got there first, so a winner is never clobbered.
  A fixed ``.part`` name is what two pods racing on one digest collided on.
- A tree is linked in a writer-unique ``.building`` directory and renamed
  into place; a rename onto a tree another writer finished fails
  (ENOTEMPTY), and the winner is used.
- Bytes this process did not write are verified before they are trusted:
  one full BLAKE3 pass per (resolved root, digest) per process for a reused
  blob, one pass over a reused tree (sizes, BLAKE3, a structural safetensors
  check).  Corrupt bytes are quarantined and downloaded again, which repairs
  the shared blob for every later reader.  A fresh download was hashed as it
  streamed and is never hashed twice.
- A writer that crashed leaves its temp forever on a persistent volume;
  ``sweep_stale_temps`` removes temps older than ``stale_after`` (6 h, the
  seed's value).  A live writer fsyncs at least every ``heartbeat_s``, so
  its temp's mtime on the server stays fresh (unflushed writes reach the
  server 0.6 s to 31 s late, docs/nfs-facts.md, "Writes and data visibility").
- ``sweep_orphan_blobs`` and ``collect_garbage`` skip every dot name:
  in-flight temps, and ``.nfsXXXX`` silly renames of blobs a process on this
  host still reads (docs/design.md, "The NFS model").

Plain ``os``/``pathlib`` code: it runs unchanged on a local disk, a real NFS
mount and inside a simfs world.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from pathlib import Path

import blake3

from ._cas_gc import Maintenance
from ._cas_model import (
    BLOBS,
    LAST_USED,
    MANIFEST,
    QUARANTINE,
    SNAPSHOTS,
    STALE_AFTER,
    CasError,
    CasStats,
    CorruptDownload,
    Entry,
    Fetch,
    GcReport,
    Manifest,
    Observer,
    TrustSet,
    digest_of,
    manifest_for,
    serve,
    sibling_name,
)
from ._cas_verify import verify_file
from .fs import RetryBudget, StrPath, ensure_dir, fsync_directory, remove_tree, writer_unique_name

__all__ = ["STALE_AFTER", "CasError", "CasStats", "CasStore", "CorruptDownload", "Entry",
           "Fetch", "GcReport", "Manifest", "TrustSet", "digest_of", "manifest_for", "serve"]


class CasStore(Maintenance):
    """Blobs by BLAKE3 digest and snapshots linked from them, under one shared root.

    Args:
        root: the CAS root (a directory on the shared volume).
        trust: this process's trust set (a fresh one by default).
        stale_after: age in seconds after which a writer temp is a crashed one's.
        heartbeat_s: a download fsyncs at least this often (its mtime is its pulse).
        observer: told about temps opening and closing (experiments only).
    """

    def __init__(self, root: StrPath, *, trust: TrustSet | None = None,
                 stale_after: float = STALE_AFTER, heartbeat_s: float = 60.0,
                 observer: Observer | None = None) -> None:
        if stale_after <= 0 or heartbeat_s <= 0 or heartbeat_s >= stale_after:
            raise ValueError(f"need 0 < heartbeat_s ({heartbeat_s!r}) < stale_after "
                             f"({stale_after!r}): a live writer's temp must never look stale")
        self.root = Path(root)
        self.blobs = self.root / BLOBS
        self.snapshots = self.root / SNAPSHOTS
        self.quarantine = self.root / QUARANTINE
        for directory in (self.blobs, self.snapshots, self.quarantine):
            ensure_dir(directory)
        self.trust = trust if trust is not None else TrustSet()
        self.stale_after = stale_after
        self.heartbeat_s = heartbeat_s
        self.observer = observer
        self.stats = CasStats()
        # Trust is keyed by the resolved root: two mount paths of one volume
        # are one store.
        self._root_key = os.path.realpath(self.root)

    def blob_path(self, digest: str) -> Path:
        return self.blobs / digest

    def snapshot_path(self, key: str) -> Path:
        return self.snapshots / key

    def _note(self, event: str, path: Path) -> None:
        if self.observer is not None:
            self.observer(event, os.fspath(path))

    # -- blobs ------------------------------------------------------------------

    def ensure_blob(self, entry: Entry, fetch: Fetch) -> Path:
        """The path of a verified blob for ``entry``, downloading it if need be.

        Raises:
            CorruptDownload: the download's bytes hash to another digest.
            CasError: the blob kept turning out corrupt.
        """
        final = self.blob_path(entry.digest)
        if self._blob_reusable(final, entry):
            return final
        return self._download(entry, fetch, final)

    def _blob_reusable(self, final: Path, entry: Entry) -> bool:
        """An existing blob is reused once verified (one pass per process), else moved aside."""
        try:
            size = os.stat(final).st_size
        except FileNotFoundError:
            return False  # maybe a stale negative entry: the link below asks the server
        if size == entry.size and (self._root_key, entry.digest) in self.trust.blobs:
            return True
        if size == entry.size and self._verify_blob(final, entry):
            return True
        self._quarantine(final, f"size {size} or digest differs from {entry.digest[:12]}")
        return False

    def _verify_blob(self, path: Path, entry: Entry) -> bool:
        try:
            check = verify_file(path, structural=False)
        except FileNotFoundError:
            return False
        self.stats.verify_passes[entry.digest] += 1
        good = check.size == entry.size and check.digest == entry.digest
        if good:
            self.trust.blobs.add((self._root_key, entry.digest))
        return good

    def _temp_path(self, final: Path) -> Path:
        return final.with_name(writer_unique_name(final))

    def _download(self, entry: Entry, fetch: Fetch, final: Path) -> Path:
        temp = self._temp_path(final)
        self._note("temp-open", temp)
        try:
            digest, size = self._stream(entry, fetch, temp)
            self.stats.download_passes[entry.digest] += 1  # hashed as it streamed
            self.stats.downloads += 1
            if digest != entry.digest or size != entry.size:
                raise CorruptDownload(f"download of {entry.path!r} gave {size} bytes hashing "
                                      f"to {digest[:12]}, expected {entry.size} bytes, "
                                      f"{entry.digest[:12]}")
            self._publish_blob(temp, final, entry)
        except BaseException:
            self._discard_temp(temp)
            raise
        finally:
            self._note("temp-done", temp)
        self.trust.blobs.add((self._root_key, entry.digest))
        return final

    def _stream(self, entry: Entry, fetch: Fetch, temp: Path) -> tuple[str, int]:
        """Write the fetched bytes to ``temp``, hashing them; fsync on a heartbeat."""
        hasher = blake3.blake3()
        size = 0
        with open(temp, "wb") as handle:
            synced = time.monotonic()
            for chunk in fetch(entry):
                handle.write(chunk)
                hasher.update(chunk)
                size += len(chunk)
                if time.monotonic() - synced >= self.heartbeat_s:
                    # Flushed data moves the temp's mtime on the server: the
                    # boot sweep of another pod sees a live writer.
                    handle.flush()
                    os.fsync(handle.fileno())
                    synced = time.monotonic()
            handle.flush()
            os.fsync(handle.fileno())
        return hasher.hexdigest(), size

    def _publish_blob(self, temp: Path, final: Path, entry: Entry) -> None:
        """``link(temp, final)``: atomic create-if-absent, checked by the server.

        EEXIST means another writer published first (a stale negative entry
        hid it from our stat): its bytes are verified and kept, or
        quarantined and replaced by ours.  open(2) on NFS: a LINK whose
        reply was lost reports EEXIST although it worked; the temp's link
        count of 2 tells.
        """
        for _ in range(3):
            try:
                os.link(temp, final)
                break
            except FileExistsError:
                if os.stat(temp).st_nlink >= 2:
                    break
                self.stats.lost_races += 1
                if self._verify_blob(final, entry):
                    break
                self._quarantine(final, f"a winner's bytes do not hash to {entry.digest[:12]}")
        else:
            raise CasError(f"blob {entry.digest[:12]} was replaced by corrupt bytes three "
                           "times while we published ours")
        os.unlink(temp)
        fsync_directory(final.parent)

    def _discard_temp(self, temp: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)

    def _quarantine(self, path: Path, reason: str) -> None:
        """Move corrupt bytes aside (a rename: readers holding them open keep reading)."""
        target = self.quarantine / sibling_name(path, ".bad")
        try:
            os.rename(path, target)
        except FileNotFoundError:
            return  # another writer moved or repaired it first
        self.stats.quarantined.append(f"{path.parent.name}/{path.name}: {reason}")

    # -- snapshots --------------------------------------------------------------

    def ensure_local(self, manifest: Manifest, fetch: Fetch) -> Path:
        """The path of a verified, materialised tree for ``manifest``.

        A tree already there (another pod's, of any age) is verified once
        per process; a corrupt one is quarantined with its bad blobs and
        built again, which downloads and so repairs the shared blobs.

        Raises:
            CorruptDownload: a download's bytes hash to another digest.
            CasError: the tree kept turning out corrupt.
        """
        snapshot = self.snapshot_path(manifest.key)
        for _ in range(3):
            if os.path.isdir(snapshot) and self._tree_reusable(snapshot, manifest):
                self.touch(manifest.key)
                return snapshot
            if self._materialise(manifest, fetch, snapshot):
                self.touch(manifest.key)
                return snapshot
        raise CasError(f"snapshot {manifest.key!r} was corrupt three times in a row")

    def _tree_reusable(self, snapshot: Path, manifest: Manifest) -> bool:
        tree_key = (self._root_key, manifest.key)
        if tree_key in self.trust.trees:
            return True
        bad = [entry for entry in manifest.entries if not self._tree_file_good(snapshot, entry)]
        if not bad:
            self.trust.trees.add(tree_key)
            return True
        self._quarantine(snapshot, "corrupt files: " + ", ".join(e.path for e in bad))
        return False

    def _tree_file_good(self, snapshot: Path, entry: Entry) -> bool:
        path = snapshot / entry.path
        try:
            status = os.stat(path)
        except FileNotFoundError:
            return False
        blob = self.blob_path(entry.digest)
        same_inode = _same_inode(status, blob)
        if status.st_size != entry.size:
            if same_inode:
                self._quarantine(blob, "its tree file has the wrong size")
            return False
        if same_inode and (self._root_key, entry.digest) in self.trust.blobs:
            return True  # this very inode was verified by this process
        try:
            check = verify_file(path, structural=entry.structural)
        except FileNotFoundError:
            return False
        self.stats.verify_passes[entry.digest] += 1
        good = check.digest == entry.digest
        if good and check.problem is not None:
            # The manifest's own bytes: downloading them again cannot help.
            raise CasError(f"snapshot file {entry.path!r} hashes to its manifest digest but "
                           f"is not valid safetensors: {check.problem}")
        if same_inode and good:
            self.trust.blobs.add((self._root_key, entry.digest))
        elif same_inode:
            self._quarantine(blob, "hard-linked into a tree, its BLAKE3 differs")
        return good

    def _build_path(self, key: str) -> Path:
        return self.snapshots / sibling_name(self.snapshot_path(key), ".building")

    def _materialise(self, manifest: Manifest, fetch: Fetch, snapshot: Path) -> bool:
        """Link verified blobs into a writer-unique directory and rename it into place.

        The blobs come first, so the build directory exists only for the
        moment the links take (the boot sweep judges it by its age).  False
        when another writer's tree won the rename.
        """
        blobs = [(entry, self.ensure_blob(entry, fetch)) for entry in manifest.entries]
        build = self._build_path(manifest.key)
        os.mkdir(build)
        self._note("temp-open", build)
        try:
            for entry, blob in blobs:
                target = build / entry.path
                if target.parent != build:
                    ensure_dir(target.parent)
                self._link_blob(entry, blob, target, fetch)
            with open(build / MANIFEST, "w", encoding="utf-8") as handle:
                handle.write(manifest.to_json())
                handle.flush()
                os.fsync(handle.fileno())
            fsync_directory(build)
            try:
                os.rename(build, snapshot)
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                self.stats.lost_races += 1
                return False  # another writer's tree is there: the caller verifies it
            fsync_directory(self.snapshots)
        finally:
            self._note("temp-done", build)
            if os.path.lexists(build):
                remove_tree(build, budget=RetryBudget())
        # Every input was verified by this process: no second pass.
        self.trust.trees.add((self._root_key, manifest.key))
        return True

    def _link_blob(self, entry: Entry, blob: Path, target: Path, fetch: Fetch) -> None:
        try:
            os.link(blob, target)
        except FileNotFoundError:
            # Quarantined or collected by another writer since we verified it.
            os.link(self.ensure_blob(entry, fetch), target)

    def touch(self, key: str) -> None:
        """Mark a snapshot used now, for the LRU of ``collect_garbage``."""
        marker = self.snapshot_path(key) / LAST_USED
        with contextlib.suppress(FileNotFoundError):
            with open(marker, "a"):
                pass
            os.utime(marker)


def _same_inode(status: os.stat_result, path: Path) -> bool:
    try:
        other = os.stat(path)
    except FileNotFoundError:
        return False
    return (status.st_ino, status.st_dev) == (other.st_ino, other.st_dev)
