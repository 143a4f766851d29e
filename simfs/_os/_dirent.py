"""``os.DirEntry`` and the ``os.scandir`` iterator, for simulated directories.

``os.DirEntry`` cannot be built from Python, so this is a look-alike with
the same methods.  Its type answers come from the READDIRPLUS reply, as on
Linux (d_type), so ``is_dir()`` costs no syscall; ``stat()`` is an lstat.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from types import TracebackType

from .._nfs._server import Attrs


class SimDirEntry:
    """One entry of a simulated directory listing."""

    __slots__ = ("_attrs", "_lstat", "_stat_cache", "name", "path")

    def __init__(self, name: str, path: str, attrs: Attrs,
                 lstat: Callable[[str], os.stat_result]) -> None:
        self.name = name
        self.path = path
        self._attrs = attrs
        self._lstat = lstat
        self._stat_cache: os.stat_result | None = None

    def __fspath__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"<DirEntry {self.name!r}>"

    def inode(self) -> int:
        return self._attrs.fileid

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._attrs.is_dir

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return not self._attrs.is_dir

    def is_symlink(self) -> bool:
        return False

    def is_junction(self) -> bool:
        return False

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if self._stat_cache is None:
            self._stat_cache = self._lstat(self.path)
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
    """An ``os.stat_result`` for simulated attributes (all files owned by root)."""
    ns = 1_000_000_000
    return os.stat_result((
        attrs.mode, attrs.fileid, dev, attrs.nlink, 0, 0, attrs.size,
        attrs.atime_ns // ns, attrs.mtime_ns // ns, attrs.ctime_ns // ns,
        attrs.atime_ns / ns, attrs.mtime_ns / ns, attrs.ctime_ns / ns,
        attrs.atime_ns, attrs.mtime_ns, attrs.ctime_ns,
        _NFS_BLKSIZE, (attrs.size + 511) // 512, 0,
    ))


# st_blksize of a Linux NFS mount: the negotiated rsize/wsize (1 MiB on knfsd).
_NFS_BLKSIZE = 1 << 20
