"""``os.DirEntry`` and the ``os.scandir`` iterator, for simulated directories.

``os.DirEntry`` cannot be built from Python, so this is a look-alike with
the same methods.  Its type answers come from the READDIRPLUS reply, as on
Linux (d_type), so ``is_dir()`` costs no syscall except on a link, which
``DirEntry`` stats to follow; ``stat()`` of a non-link is an lstat.
"""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Callable, Iterator
from types import TracebackType

from .._nfs._fsstat import FsStat
from .._nfs._server import Attrs


class SimDirEntry:
    """One entry of a simulated directory listing."""

    __slots__ = ("_attrs", "_lstat_cache", "_stat", "_stat_cache", "name", "path")

    def __init__(self, name: str, path: str, attrs: Attrs,
                 stat: Callable[[str, bool], os.stat_result]) -> None:
        self.name = name
        self.path = path
        self._attrs = attrs
        self._stat = stat  # (path, follow_symlinks) -> the stat syscall's answer
        self._stat_cache: os.stat_result | None = None
        self._lstat_cache: os.stat_result | None = None

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"<DirEntry {self.name!r}>"

    def inode(self) -> int:
        return self._attrs.fileid

    def _target_mode(self) -> int | None:
        """A link's target's mode (one stat, as DirEntry does), None if dangling."""
        try:
            return self.stat().st_mode
        except FileNotFoundError:
            return None

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        if self._attrs.is_link:
            if not follow_symlinks:
                return False
            mode = self._target_mode()
            return mode is not None and stat_mod.S_ISDIR(mode)
        return self._attrs.is_dir

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        if self._attrs.is_link:
            if not follow_symlinks:
                return False
            mode = self._target_mode()
            return mode is not None and stat_mod.S_ISREG(mode)
        return not self._attrs.is_dir

    def is_symlink(self) -> bool:
        # d_type DT_LNK, from the READDIRPLUS reply's file type (NF3LNK).
        return self._attrs.is_link

    def is_junction(self) -> bool:
        return False

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if not follow_symlinks or not self._attrs.is_link:
            if self._lstat_cache is None:
                self._lstat_cache = self._stat(self.path, False)
            return self._lstat_cache
        if self._stat_cache is None:
            self._stat_cache = self._stat(self.path, True)
        return self._stat_cache


class SimScandirIterator:
    """What ``os.scandir`` returns: an iterator that is also a context manager."""

    def __init__(self, entries: list[SimDirEntry]) -> None:
        self._entries: Iterator[SimDirEntry] = iter(entries)

    def __iter__(self) -> SimScandirIterator:
        return self

    def __next__(self) -> SimDirEntry:
        return next(self._entries)

    def close(self) -> None:
        self._entries = iter(())

    def __enter__(self) -> SimScandirIterator:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def stat_result(attrs: Attrs, dev: int) -> os.stat_result:
    """An ``os.stat_result`` for simulated attributes."""
    ns = 1_000_000_000
    return os.stat_result((
        attrs.mode, attrs.fileid, dev, attrs.nlink, attrs.uid, attrs.gid, attrs.size,
        attrs.atime_ns // ns, attrs.mtime_ns // ns, attrs.ctime_ns // ns,
        attrs.atime_ns / ns, attrs.mtime_ns / ns, attrs.ctime_ns / ns,
        attrs.atime_ns, attrs.mtime_ns, attrs.ctime_ns,
        _NFS_BLKSIZE, attrs.used // 512, 0,
    ))


# st_blksize of a Linux NFS mount: the negotiated rsize/wsize (1 MiB on knfsd).
_NFS_BLKSIZE = 1 << 20
_NFS_BLOCK_BITS = _NFS_BLKSIZE.bit_length() - 1
# The mount's flags as statvfs reports them (the kernel's ST_* of the
# mount: every simulated mount is relatime, /proc/mounts says; ro adds one).
_ST_RDONLY = 1
_ST_RELATIME = 4096
_NAME_MAX = 255  # namlen=255 in /proc/mounts


def statvfs_result(counts: FsStat, *, readonly: bool,
                   block_bits: int = _NFS_BLOCK_BITS) -> os.statvfs_result:
    """An ``os.statvfs_result`` as ``nfs_statfs`` (fs/nfs/super.c) builds it.

    Block size and fragment size are the superblock's block size, the wsize
    (1 MiB); the byte counts are rounded up to whole blocks; the free files
    are the available ones (``afiles``), and glibc copies them to f_favail.
    NFS leaves f_fsid unset, so it is 0.  A host's local disk passes
    ``block_bits=12``: ext4's and tmpfs's 4 KiB blocks.
    """
    block = 1 << block_bits
    round_up = block - 1
    return os.statvfs_result((
        block, block,
        (counts.tbytes + round_up) >> block_bits,
        (counts.fbytes + round_up) >> block_bits,
        (counts.abytes + round_up) >> block_bits,
        counts.tfiles, counts.afiles, counts.afiles,
        _ST_RELATIME | (_ST_RDONLY if readonly else 0), _NAME_MAX,
    ), {"f_fsid": 0})
