"""File data on the real disk: ``World(store=)``'s block store.

Without a store the server keeps a file as immutable 4 KiB ``bytes`` blocks
in memory, which hosts' page caches share (``_server.Inode``,
``_pagecache.Page``): a file costs its size in RAM once.  With one, a block
is written once to a real file and referred to by its number (an ``int``):
the server's block map, and every clean page a host caches, hold that number
and read the bytes back when a call wants them.  So RAM holds the numbers
and the dirty pages, not the data.

A block in the store never changes: a WRITE that changes a block writes a
new one and points the server's map at it, exactly as the in-memory server
replaces a ``bytes`` object.  That is what keeps the store invisible to the
model: a host that cached a page before another host's WRITE still holds the
old number, and still reads the old bytes, as its stale page must (NFS
caches are allowed to be stale, and simfs models that).  Old blocks are not
reclaimed: the store grows by 4 KiB per block written, including every
partial-block WRITE (a page's dirty range merged into its block).

The store's file is unlinked as soon as it is opened (in a temporary
directory when the world made one, which goes at once too), so nothing is
left on the disk after the process ends, however it ends; the space is
freed when the world is garbage-collected (``weakref.finalize``).

A real error under the store (a full disk's ``ENOSPC``, ``EDQUOT``, ``EIO``)
or a write past ``store_size`` fails the store: the WRITE that met it
changes nothing on the simulated server, every later block write raises the
same ``StoreError``, and ``World.run()`` raises it at the end, as it does a
``SimulationEscape`` (``World`` passes ``on_failure``).  Never a simulated
``OSError``: the program under test never sees the real disk.
"""

from __future__ import annotations

import errno
import os
import tempfile
import weakref
from array import array
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any, Final, NoReturn

from .._errors import StoreError
from ._fsstat import BLOCK

# os.pwritev takes at most IOV_MAX (1024 on Linux) buffers per call.
_IOV_MAX: Final = 1024

# The real calls, bound before simfs routes ``os`` (simfs's own modules keep
# their bindings): the store is used inside simulated processes' calls, and
# its finalizer may run in one, where ``os.pwritev`` is a simulated call.
_pwritev = os.pwritev
_pread = os.pread
_close = os.close


class BlockStore:
    """Immutable 4 KiB blocks, appended to one unlinked real file, by number."""

    def __init__(self, directory: str | None, limit: int | None = None) -> None:
        """Open the store's file under ``directory`` (None: a temporary directory).

        Raises:
            OSError: the file cannot be made there (the caller words it).
        """
        made = directory is None
        if directory is None:
            directory = tempfile.mkdtemp(prefix="simfs-store-")
        try:
            fd, name = tempfile.mkstemp(prefix="simfs-store-", suffix=".blocks", dir=directory)
            os.unlink(name)
        finally:
            if made:
                os.rmdir(directory)
        self.directory = directory
        self.temporary = made
        self.limit = limit
        self._fd = fd
        self._blocks = 0
        self.failure: StoreError | None = None
        self.on_failure: Callable[[StoreError], None] | None = None
        weakref.finalize(self, _close, fd)

    @property
    def used(self) -> int:
        """Bytes the store has written to the disk (every block, old ones too)."""
        return self._blocks * BLOCK

    def put(self, blocks: Sequence[bytes | bytearray | memoryview], what: str) -> int:
        """Write ``blocks`` (each exactly ``BLOCK`` bytes) after the others; the
        first one's number (the rest follow it).  ``what`` names the file for
        an error.  Nothing is numbered unless every block was written.

        Raises:
            StoreError: the disk refused, or the store would pass its limit.
        """
        if self.failure is not None:
            raise self.failure
        first, count = self._blocks, len(blocks)
        if self.limit is not None and (first + count) * BLOCK > self.limit:
            self._fail(f"writing {count * BLOCK} bytes of {what} would take the store past "
                       f"World(store_size={self.limit}) (it holds {first * BLOCK} bytes, "
                       "old versions of blocks included)")
        position = first * BLOCK
        for start in range(0, count, _IOV_MAX):
            chunk = blocks[start:start + _IOV_MAX]
            try:
                written = _pwritev(self._fd, chunk, position)
            except OSError as error:
                self._fail(f"writing {len(chunk) * BLOCK} bytes of {what} failed: {error}")
            if written != len(chunk) * BLOCK:  # a short write: the disk filled up
                self._fail(f"writing {len(chunk) * BLOCK} bytes of {what} wrote only "
                           f"{written}: [Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}")
            position += written
        self._blocks = first + count
        return first

    def get(self, number: int) -> bytes:
        """Block ``number``'s bytes."""
        return self.get_run(number, 1)

    def get_run(self, first: int, count: int) -> bytes:
        """Blocks ``first`` to ``first+count-1``, joined: one read."""
        size = count * BLOCK
        data = _pread(self._fd, size, first * BLOCK)
        if len(data) != size:  # the file was written past these: never short
            raise StoreError(f"the store under {self.directory!r} returned {len(data)} of "
                             f"{size} bytes of blocks {first}..{first + count - 1}; its file "
                             "was changed outside simfs")
        return data

    def resolve(self, items: Sequence[bytes | bytearray | memoryview | int]
                ) -> list[bytes | bytearray | memoryview]:
        """``items`` with each store number replaced by its block's bytes, a
        run of consecutive numbers read in one go (a file written in order
        is stored in order)."""
        out: list[bytes | bytearray | memoryview] = []
        count = len(items)
        position = 0
        while position < count:
            item = items[position]
            if type(item) is not int:
                out.append(item)  # type: ignore[arg-type]  # not an int: bytes-like
                position += 1
                continue
            end = position + 1
            while end < count and items[end] == item + (end - position) \
                    and type(items[end]) is int:
                end += 1
            if end - position == 1:
                out.append(self.get(item))
            else:
                run = memoryview(self.get_run(item, end - position))
                out.extend(run[BLOCK * k:BLOCK * (k + 1)] for k in range(end - position))
            position = end
        return out

    def _fail(self, problem: str) -> NoReturn:
        where = "a temporary directory" if self.temporary else repr(self.directory)
        error = StoreError(
            f"the block store under {where}: {problem}.  The simulated file is left as it "
            "was before that WRITE and the run stops: give World(store=) a directory on a "
            "disk with room (World(store_size=) checks the room before the run)")
        self.failure = error
        if self.on_failure is not None:
            self.on_failure(error)
        raise error


ALLOWED: Final = ("None (file data in memory), True (a temporary directory simfs makes and "
                  "removes), or the path of an existing directory the test can write to")


def open_store(value: object, size: int | None) -> BlockStore | None:
    """``World(store=, store_size=)``: the store, or None; refused before the run.

    Args:
        size: ``store_size`` in bytes, already parsed; None: no limit but the disk's.

    Raises:
        TypeError: ``value`` is none of ``ALLOWED``.
        ValueError: the directory does not exist, is not one, cannot be
            written to, or has less free space than ``size``; or ``size``
            without a store.
    """
    if value is None or value is False:
        if size is not None:
            raise ValueError(f"World(store_size={size}) limits a block store, but there is "
                             f"none: pass World(store=...) too; allowed store: {ALLOWED}")
        return None
    if value is True:
        directory: str | None = None
        shown = tempfile.gettempdir()
    elif isinstance(value, str | os.PathLike):
        path = os.fspath(value)
        if not isinstance(path, str):
            raise TypeError(f"World(store=): {value!r} is a bytes path; allowed: {ALLOWED}")
        directory = shown = path
        if not os.path.exists(directory):
            raise ValueError(f"World(store=): {directory!r} does not exist; allowed: {ALLOWED}")
        if not os.path.isdir(directory):
            raise ValueError(f"World(store=): {directory!r} is not a directory; "
                             f"allowed: {ALLOWED}")
    else:
        raise TypeError(f"World(store=): {value!r} is not a store; allowed: {ALLOWED}")
    if size is not None:
        info = os.statvfs(shown)
        free = info.f_bavail * info.f_frsize
        if size > free:
            raise ValueError(
                f"World(store_size={size}): {size} bytes is more than the {free} bytes "
                f"({free / 2**30:.1f} GiB) free under {shown!r}; allowed: at most {free}, or a "
                "store directory on a disk with more room")
    try:
        return BlockStore(directory, size)
    except OSError as error:
        raise ValueError(f"World(store=): cannot write under {shown!r}: {error}; "
                         f"allowed: {ALLOWED}") from None


_CHUNK_BITS: Final = 10
_CHUNK: Final = 1 << _CHUNK_BITS
_ABSENT: Final = -1
_EMPTY_CHUNK: Final = array("q", [_ABSENT]) * _CHUNK


class NumberMap(MutableMapping[int, "bytes | int"]):
    """Block index -> store number, 8 bytes an entry.

    What a dict of ``int`` to ``int`` does at about 100 bytes an entry, in
    arrays of 1024 indexes, made as an index in them is first set (so a
    sparse file's untouched stretches cost nothing).  A file of 10 GiB has
    2.6 million blocks: 21 MB here, 270 MB in a dict.  Only numbers are
    kept: a store's server never maps a block to bytes.
    """

    __slots__ = ("_chunks", "_count")

    def __init__(self) -> None:
        self._chunks: dict[int, array[int]] = {}
        self._count = 0

    def get(self, index: int, default: Any = None) -> Any:
        chunk = self._chunks.get(index >> _CHUNK_BITS)
        if chunk is None:
            return default
        number = chunk[index & (_CHUNK - 1)]
        return default if number == _ABSENT else number

    def __getitem__(self, index: int) -> int:
        number: int = self.get(index, _ABSENT)
        if number == _ABSENT:
            raise KeyError(index)
        return number

    def __setitem__(self, index: int, number: bytes | int) -> None:
        assert type(number) is int and number >= 0  # a store number, never bytes
        chunk = self._chunks.get(index >> _CHUNK_BITS)
        if chunk is None:
            chunk = self._chunks[index >> _CHUNK_BITS] = array("q", _EMPTY_CHUNK)
        if chunk[index & (_CHUNK - 1)] == _ABSENT:
            self._count += 1
        chunk[index & (_CHUNK - 1)] = number

    def __delitem__(self, index: int) -> None:
        chunk = self._chunks.get(index >> _CHUNK_BITS)
        if chunk is None or chunk[index & (_CHUNK - 1)] == _ABSENT:
            raise KeyError(index)
        chunk[index & (_CHUNK - 1)] = _ABSENT
        self._count -= 1

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and self.get(index, _ABSENT) != _ABSENT

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[int]:
        for key in sorted(self._chunks):
            base = key << _CHUNK_BITS
            for offset, number in enumerate(self._chunks[key]):
                if number != _ABSENT:
                    yield base + offset

    def clear(self) -> None:
        self._chunks.clear()
        self._count = 0
