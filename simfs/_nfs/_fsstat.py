"""FSSTAT: the space and inodes the export's filesystem reports (RFC 1813 3.3.18).

The server exports a 1 TiB filesystem laid out as mke2fs's defaults lay
out an ext4 (mke2fs(8), mke2fs.conf(5)): 4 KiB blocks, one inode per 16 KiB
(``inode_ratio``), so 2**26 inodes, and 5 % of the blocks reserved for root
(``-m``), which knfsd reports as the difference between free and available
bytes (``fbytes``/``abytes``, from the exported filesystem's statfs).  What
the files take is counted as ext4 counts it: a regular file's data in whole
blocks it was written in (a hole costs nothing), a directory one block, a
symbolic link of fewer than 60 bytes none (its target lives in the inode, a
"fast symlink"): ``Inode.used``, which GETATTR reports as fattr3's
``used`` (a file's ``st_blocks``).  An idealisation: a real
ext4 of that size reports less than 1 TiB and fewer free inodes, having
spent some on its own metadata (inode tables, journal, reserved inodes).

The data lives in memory (or in ``World(store=)``'s real file, whose disk
filling up is a ``StoreError``, never the export's ENOSPC), so the export
never fills: a run that must see a full disk injects ENOSPC with a
``FaultPlan``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

BLOCK: Final = 4096
TOTAL_BYTES: Final = 1 << 40
TOTAL_FILES: Final = TOTAL_BYTES // (16 * 1024)
RESERVED_BYTES: Final = TOTAL_BYTES * 5 // 100
FAST_SYMLINK_MAX: Final = 59  # ext4: a target shorter than 60 bytes sits in the inode


@dataclass(frozen=True, slots=True)
class FsStat:
    """An FSSTAT reply's counts (bytes and files: total, free, available)."""

    tbytes: int
    fbytes: int
    abytes: int
    tfiles: int
    ffiles: int
    afiles: int


def fsstat(used_blocks: int, inodes: int, total_bytes: int = TOTAL_BYTES) -> FsStat:
    """What FSSTAT answers with ``used_blocks`` taken and ``inodes`` in use,
    on an ext4 of ``total_bytes`` laid out as above."""
    total_files = total_bytes // (16 * 1024)
    free = max(total_bytes - used_blocks * BLOCK, 0)
    files = max(total_files - inodes, 0)
    return FsStat(total_bytes, free, max(free - total_bytes * 5 // 100, 0), total_files, files,
                  files)
