"""The processes of the CAS scenario, and the seed's store before its PR (seed 004).

Everything here is plain code that runs as a simulated process (root
``/shared``) or as a real OS process on a real mount: the scenario's writers
stream a model from an in-memory "network" with a delay per chunk, into a
``CasStore`` (the reference) or a ``SeedStore`` (the seed's code before
gw#597/gw#598), then read every file of the snapshot back and hash it, as an
inference server loading the model would.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import blake3

from reference._cas_model import LAST_USED, WRITER_TEMP
from reference.cas import CasStore, Entry, Fetch, Manifest, manifest_for
from reference.fs import SILLY_NAME

HOSTS = ("pod-a", "pod-b")
MOUNT = "vers=3"
KEY = "rev-1"

# -- the seed's store before its PR ----------------------------------------------------


class SeedStore(CasStore):
    """The seed's CAS code before gw#597/gw#598, as its PR describes it.

    - Downloads stage to a fixed ``<digest>.part`` and ``os.replace`` it: safe
      only while one writer owns the root.
    - Snapshots are linked in a fixed ``<key>.building`` directory, cleared
      with ``rmtree`` if present, made before the blobs are fetched.
    - A blob of the right size is reused unchecked; an existing snapshot
      directory is used with no check at all.
    - No boot sweep; the orphan sweep takes every unreferenced name in
      ``blobs/`` for an orphan, in-flight temps included, whatever its age.

    That code is public (the PR is merged in the worker's repository, and the
    fix's parent commit holds it); this store is written from the PR's
    description of it (seed 004), not copied from it.
    """

    def _temp_path(self, final: Path) -> Path:
        return final.with_name(final.name + ".part")

    def _blob_reusable(self, final: Path, entry: Entry) -> bool:
        try:
            return os.stat(final).st_size == entry.size
        except FileNotFoundError:
            return False

    def _publish_blob(self, temp: Path, final: Path, entry: Entry) -> None:
        os.replace(temp, final)

    def _tree_reusable(self, snapshot: Path, manifest: Manifest) -> bool:
        return True

    def _materialise(self, manifest: Manifest, fetch: Fetch, snapshot: Path) -> bool:
        build = self.snapshots / f"{manifest.key}.building"
        # The writer takes the fixed name from here on: a makedirs that meets
        # another writer's directory (EEXIST) is a collision too.
        self._note("temp-open", build)
        try:
            shutil.rmtree(build, ignore_errors=True)
            os.makedirs(build)
            for entry in manifest.entries:
                blob = self.ensure_blob(entry, fetch)
                os.link(blob, build / entry.path)
            with open(build / ".manifest.json", "w", encoding="utf-8") as handle:
                handle.write(manifest.to_json())
            try:
                os.rename(build, snapshot)
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                shutil.rmtree(build, ignore_errors=True)
        finally:
            self._note("temp-done", build)
        return True

    def sweep_stale_temps(self, *, now: float | None = None) -> list[str]:
        return []

    def _orphan_candidates(self) -> list[str]:
        return sorted(os.listdir(self.blobs))

    def sweep_orphan_blobs(self, *, min_age: float = 0.0, now: float | None = None
                           ) -> list[str]:
        return super().sweep_orphan_blobs(min_age=min_age, now=now)


STORES: dict[str, type[CasStore]] = {"seed": SeedStore, "reference": CasStore}

# -- the model and the network ----------------------------------------------------------


def model_files(chunks: int, chunk: int, tag: str = "") -> dict[str, bytes]:
    """A small model: one safetensors file of ``chunks`` chunks, and a config."""
    count = max(1, (chunks * chunk - 128) // 4)
    header = json.dumps({"__metadata__": {"tag": tag},
                         "w": {"dtype": "F32", "shape": [count],
                               "data_offsets": [0, 4 * count]}}).encode()
    body = bytes((index * 7 + len(tag)) % 251 for index in range(4 * count))
    return {"model.safetensors": struct.pack("<Q", len(header)) + header + body,
            "config.json": json.dumps({"model": tag or "m", "layers": 2}).encode()}


def network(files: dict[str, bytes], chunk: int, chunk_s: float,
            exit_after_chunks: int | None = None) -> Fetch:
    """A fetch that streams ``files`` with ``chunk_s`` of network time per chunk.

    ``exit_after_chunks`` kills the whole OS process mid-download (the real
    backend's crash; the simulation crashes the host with a ``HostCrash``).
    """
    sent = [0]

    def fetch(entry: Entry) -> Iterator[bytes]:
        data = files[entry.path]
        for start in range(0, len(data), chunk):
            time.sleep(chunk_s)
            if exit_after_chunks is not None and sent[0] >= exit_after_chunks:
                os._exit(70)
            sent[0] += 1
            yield data[start:start + chunk]

    return fetch


def weights(manifest: Manifest) -> Entry:
    """The manifest's safetensors entry."""
    (entry,) = [e for e in manifest.entries if e.structural]
    return entry


def read_back(snapshot: Path, manifest: Manifest) -> int:
    """Read every file of the snapshot as a loader would; how many hash wrong."""
    corrupt = 0
    for entry in manifest.entries:
        hasher = blake3.blake3()
        with open(snapshot / entry.path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                hasher.update(chunk)
        corrupt += hasher.hexdigest() != entry.digest
    return corrupt


def _journal() -> tuple[list[list[Any]], Callable[[str, str], None]]:
    events: list[list[Any]] = []

    def observe(event: str, path: str) -> None:
        events.append([event, path, time.monotonic()])

    return events, observe


def _passes(store: CasStore) -> dict[str, Any]:
    verify = store.stats.verify_passes
    return {"verify_passes": dict(verify), "download_passes": dict(store.stats.download_passes),
            "max_passes": max(verify.values(), default=0),
            "lost_races": store.stats.lost_races, "quarantined": len(store.stats.quarantined)}


# -- the processes ----------------------------------------------------------------------


def prepare(root: str, directory: str) -> None:
    """An empty directory for one trial (a real mount may hold an earlier run's)."""
    base = Path(root) / directory
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)


def race_writer(root: str, directory: str, variant: str, files: dict[str, bytes], key: str,
                start_s: float, chunk: int, chunk_s: float) -> dict[str, Any]:
    """One pod: is the model resident?  Later: ensure it, then load it."""
    events, observe = _journal()
    store = STORES[variant](Path(root) / directory, observer=observe)
    manifest = manifest_for(key, files)
    # The residency probe at boot leaves a negative entry on this host.
    os.path.isdir(store.snapshot_path(key))
    time.sleep(start_s)
    result: dict[str, Any] = {"journal": events, "corrupt": 0, "error": None, "ensure_s": None}
    asked = time.monotonic()
    try:
        snapshot = store.ensure_local(manifest, network(files, chunk, chunk_s))
        result["ensure_s"] = time.monotonic() - asked
        result["corrupt"] = read_back(snapshot, manifest)
    except Exception as error:  # the row counts a writer that failed; the run goes on
        result["error"] = f"{type(error).__name__}: {error}"
    result.update(_passes(store))
    return result


def plant_stale_blob(root: str, directory: str, files: dict[str, bytes], key: str) -> None:
    """A right-size blob of the weights another pod left, of any age, corrupt."""
    store = CasStore(Path(root) / directory)
    entry = weights(manifest_for(key, files))
    with open(store.blob_path(entry.digest), "wb") as handle:
        handle.write(b"\0" * entry.size)


def plant_corrupt_tree(root: str, directory: str, files: dict[str, bytes], key: str) -> str:
    """The seed's test set-up: a tree whose safetensors blob is corrupt, right size.

    Another pod materialised the model long ago; its blob has since been
    damaged in place, and the tree's hard link shares the damage.
    """
    base = Path(root) / directory
    store = CasStore(base)
    manifest = manifest_for(key, files)
    store.ensure_local(manifest, network(files, 1 << 20, 0.0))
    blob = store.blob_path(weights(manifest).digest)
    size = os.stat(blob).st_size
    with open(blob, "r+b") as handle:
        handle.seek(size - 64)
        handle.write(b"\xff" * 64)
    return blob.name


def check_unseen_ref(root: str, directory: str, variant: str, files: dict[str, bytes],
                     key: str) -> dict[str, Any]:
    """A process that never saw the ref ensures it locally, then loads it."""
    store = STORES[variant](Path(root) / directory)
    manifest = manifest_for(key, files)
    result: dict[str, Any] = {"corrupt": 0, "error": None}
    try:
        snapshot = store.ensure_local(manifest, network(files, 1 << 20, 0.0))
        result["corrupt"] = read_back(snapshot, manifest)
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
    entry = weights(manifest)
    blob = store.blob_path(entry.digest)
    with contextlib.suppress(FileNotFoundError):
        result["repaired"] = read_back(blob.parent, Manifest(
            key, (Entry(blob.name, entry.digest, entry.size),))) == 0
    result.setdefault("repaired", False)
    result["quarantined"] = len(store.stats.quarantined)
    result.update(_passes(store))
    return result


def crashing_writer(root: str, directory: str, variant: str, files: dict[str, bytes], key: str,
                    chunk: int, chunk_s: float, exit_after_chunks: int | None) -> None:
    """A pod that prepares the root, starts a download and dies in the middle of it.

    It prepares the root itself so that the crash, scheduled for a time
    from the world's start, lands in this process's run.
    """
    prepare(root, directory)
    store = STORES[variant](Path(root) / directory)
    store.ensure_local(manifest_for(key, files),
                       network(files, chunk, chunk_s, exit_after_chunks))


def live_writer(root: str, directory: str, variant: str, files: dict[str, bytes], key: str,
                start_s: float, chunk: int, chunk_s: float, heartbeat_s: float
                ) -> dict[str, Any]:
    """A pod downloading another model while the next pod boots."""
    events, observe = _journal()
    store = STORES[variant](Path(root) / directory, observer=observe, heartbeat_s=heartbeat_s,
                            stale_after=heartbeat_s * 4)
    time.sleep(start_s)
    result: dict[str, Any] = {"journal": events, "corrupt": 0, "error": None}
    try:
        snapshot = store.ensure_local(manifest_for(key, files), network(files, chunk, chunk_s))
        result["corrupt"] = read_back(snapshot, manifest_for(key, files))
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
    return result


def booting_pod(root: str, directory: str, variant: str, start_s: float, stale_after: float
                ) -> dict[str, Any]:
    """The next pod's boot: sweep stale temps, then orphan blobs; list what is left."""
    time.sleep(start_s)
    store = STORES[variant](Path(root) / directory, stale_after=stale_after,
                            heartbeat_s=stale_after / 4)
    swept = store.sweep_stale_temps()
    orphans = store.sweep_orphan_blobs()
    left = [f"{sub}/{name}" for sub in ("blobs", "snapshots")
            for name in sorted(os.listdir(store.root / sub)) if is_temp(name)]
    return {"swept": swept, "orphans_removed": orphans, "temps_left": left}


def is_temp(name: str) -> bool:
    """A writer's temp of either variant: a dot temp, a ``.part`` or a ``.building``."""
    return bool(WRITER_TEMP.match(name)) or name.endswith((".part", ".building"))


def temp_names(journal: Iterable[list[Any]]) -> set[str]:
    """``dir/name`` of every temp a writer's journal opened."""
    return {f"{Path(path).parent.name}/{Path(path).name}" for event, path, _ in journal
            if event == "temp-open"}


# -- garbage collection beside readers ------------------------------------------------------


def two_snapshots(root: str, directory: str, old: dict[str, bytes], live: dict[str, bytes]
                  ) -> None:
    """An ``old`` snapshot last used two hours ago and a ``live`` one in use now."""
    prepare(root, directory)
    store = CasStore(Path(root) / directory)
    store.ensure_local(manifest_for("old", old), network(old, 1 << 20, 0.0))
    stamp = time.time() - 7200
    os.utime(store.snapshot_path("old") / LAST_USED, (stamp, stamp))
    store.ensure_local(manifest_for("live", live), network(live, 1 << 20, 0.0))


def slow_reader(root: str, directory: str, key: str, files: dict[str, bytes], chunk: int,
                chunk_s: float, via_blob: bool) -> dict[str, Any]:
    """A pod reading a snapshot's weights slowly, across the collection.

    ``via_blob``: it reads ``blobs/<digest>`` itself (a verify pass, or a
    peer transfer), so the collector's unlink of that very name meets the
    open file: Linux renames the dentry in use (fs/nfs/dir.c, nfs_unlink).
    Otherwise it loads through the snapshot's path, as a server would.
    """
    entry = weights(manifest_for(key, files))
    base = Path(root) / directory
    path = base / "blobs" / entry.digest if via_blob else base / "snapshots" / key / entry.path
    hasher = blake3.blake3()
    try:
        with open(path, "rb") as handle:
            while data := handle.read(chunk):
                hasher.update(data)
                time.sleep(chunk_s)
    except OSError as error:  # ESTALE: another host removed the last link
        return {"corrupt": 0, "error": f"{type(error).__name__}: {error}"}
    return {"corrupt": int(hasher.hexdigest() != entry.digest), "error": None}


def collect(root: str, directory: str, variant: str, start_s: float, max_bytes: int
            ) -> dict[str, Any]:
    """A pod's size-capped collection, then its orphan sweep, while the readers read."""
    time.sleep(start_s)
    store = STORES[variant](Path(root) / directory)
    result: dict[str, Any] = {"evicted": [], "silly_seen": [], "error": None}
    try:
        report = store.collect_garbage(max_bytes)
        result["evicted"] = report.evicted
        result["silly_seen"] = [name for name in os.listdir(store.blobs)
                                if SILLY_NAME.match(name)]
        store.sweep_orphan_blobs()
    except OSError as error:  # EBUSY: unlinking a .nfs file still open on this host
        result["error"] = f"{type(error).__name__}: {error}"
    return result


def leftovers(root: str, directory: str, variant: str) -> dict[str, Any]:
    """Once the readers closed: one more collection, then what is left over."""
    store = STORES[variant](Path(root) / directory)
    with contextlib.suppress(OSError):
        store.collect_garbage(1 << 40)
    left = [f"blobs/{name}" for name in sorted(os.listdir(store.blobs))
            if SILLY_NAME.match(name)]
    left += [f"snapshots/{name}" for name in sorted(os.listdir(store.snapshots))
             if name.startswith(".")]
    return {"left": left, "snapshots": sorted(name for name in os.listdir(store.snapshots)
                                              if not name.startswith("."))}
