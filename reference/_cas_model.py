"""The values of the CAS store: manifests, trust sets, stats, names (seed 004).

``reference.cas`` re-exports the public ones.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import blake3

from .fs import writer_unique_name

BLOBS, SNAPSHOTS, QUARANTINE = "blobs", "snapshots", "quarantine"
MANIFEST, LAST_USED = ".manifest.json", ".last_used"
STALE_AFTER = 6 * 3600.0  # the seed's boot sweep: temps older than 6 h are a crashed writer's
DIGEST = re.compile(r"^[0-9a-f]{64}$")
# writer_unique_name's shape: ".<name>.<host>.<pid>.<12 hex>.tmp", and its
# siblings for trees being linked or evicted.
WRITER_TEMP = re.compile(r"^\..+\.\d+\.[0-9a-f]{12}\.(tmp|building|evicting)$")

Fetch = Callable[["Entry"], Iterable[bytes]]
"""Streams the bytes of one manifest entry (the network: R2, a CDN)."""
Observer = Callable[[str, str], None]
"""Told ``(event, path)`` when a temp is opened and done: for experiments."""


class CasError(RuntimeError):
    """The store could not produce verified bytes."""


class CorruptDownload(CasError):
    """A download's bytes do not hash to the digest it was asked for."""


@dataclass(frozen=True)
class Entry:
    """One file of a snapshot: where it goes, and the blob that holds it."""

    path: str
    digest: str
    size: int

    def __post_init__(self) -> None:
        parts = Path(self.path).parts
        if (not self.path or Path(self.path).is_absolute() or ".." in parts
                or parts[0].startswith(".")):
            raise ValueError(f"entry path {self.path!r} must be relative, without '..', "
                             "and not start with a dot (dot names are the store's own)")
        if not DIGEST.match(self.digest):
            raise ValueError(f"entry {self.path!r}: digest {self.digest!r} is not 64 "
                             "lowercase hex digits (BLAKE3)")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"entry {self.path!r}: size {self.size!r} must be an int >= 0")

    @property
    def structural(self) -> bool:
        """Whether the tree check parses this file as safetensors."""
        return self.path.endswith(".safetensors")


@dataclass(frozen=True)
class Manifest:
    """What a snapshot (one model revision, the seed's ref) is made of."""

    key: str
    entries: tuple[Entry, ...]

    def __post_init__(self) -> None:
        if not self.key or "/" in self.key or self.key.startswith("."):
            raise ValueError(f"snapshot key {self.key!r} must be a non-empty name without "
                             "'/' that does not start with a dot")

    def to_json(self) -> str:
        return json.dumps({"key": self.key, "entries": [vars(e) for e in self.entries]},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        return cls(data["key"], tuple(Entry(**entry) for entry in data["entries"]))


def digest_of(data: bytes) -> str:
    """The BLAKE3 hex digest of ``data``: the name its blob has in the store."""
    return blake3.blake3(data).hexdigest()


@dataclass
class TrustSet:
    """What this process has verified, by (resolved root, digest or key).

    Process-local on purpose: another pod's verification says nothing about
    the bytes as this process will read them.  Share one between stores of
    the same process to verify once however many stores it builds.
    """

    blobs: set[tuple[str, str]] = field(default_factory=set)
    trees: set[tuple[str, str]] = field(default_factory=set)


@dataclass
class CasStats:
    """What the store did: hash passes by digest, quarantines, sweeps."""

    download_passes: Counter[str] = field(default_factory=Counter)
    verify_passes: Counter[str] = field(default_factory=Counter)
    downloads: int = 0
    lost_races: int = 0
    quarantined: list[str] = field(default_factory=list)
    swept: list[str] = field(default_factory=list)


@dataclass
class GcReport:
    """What one ``collect_garbage`` did."""

    evicted: list[str] = field(default_factory=list)
    removed_blobs: list[str] = field(default_factory=list)
    bytes_before: int = 0
    bytes_after: int = 0
    errors: list[str] = field(default_factory=list)


def manifest_for(key: str, files: dict[str, bytes]) -> Manifest:
    """The manifest of a snapshot holding ``files`` (path -> bytes)."""
    return Manifest(key, tuple(Entry(path, digest_of(data), len(data))
                               for path, data in sorted(files.items())))


def serve(files: dict[str, bytes], chunk: int = 1 << 20) -> Fetch:
    """A fetch that streams ``files`` from memory: for tests and experiments."""

    def fetch(entry: Entry) -> Iterable[bytes]:
        data = files[entry.path]
        return (data[start:start + chunk] for start in range(0, len(data), chunk))

    return fetch


def sibling_name(path: Path, suffix: str) -> str:
    """``writer_unique_name(path)`` with ``suffix`` in place of ``.tmp``."""
    return writer_unique_name(path).removesuffix(".tmp") + suffix
