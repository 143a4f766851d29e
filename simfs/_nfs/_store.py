"""File data on the real disk: ``World(store=)``'s block store.

Without a store the server keeps a file as immutable 4 KiB ``bytes`` blocks
in memory, which hosts' page caches share (``_server.Inode``,
``_pagecache.Page``): a file costs its size in RAM once.  With one, a block
is written once to a real file and referred to by its number (an ``int``):
the server's block map, every clean page a host caches, and a host's dirty
pages once a file has more than ``_pagecache.SPILL_PAGES`` of them, hold
that number and read the bytes back when a call wants them.  So RAM holds
numbers and a bounded number of dirty pages, not the data.

A block in the store never changes while anything refers to it: a WRITE
that changes a block writes a new one and points the server's map at it,
exactly as the in-memory server replaces a ``bytes`` object.  That is what
keeps the store invisible to the model: a host that cached a page before
another host's WRITE still holds the old number, and still reads the old
bytes, as its stale page must (NFS caches are allowed to be stale, and
simfs models that).  A block nothing refers to any more (no server's map,
no host's clean, dirty or stale page) is found by ``collect``, between two
syscalls, and written over by a later ``put``, smallest number first.

The store's file is unlinked as soon as it is opened (in a temporary
directory when the world made one, which goes at once too), so nothing is
left on the disk after the process ends, however it ends; its descriptor
is closed, and the space freed, by ``World.close()``, or when the world is
garbage-collected (``weakref.finalize``).

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
    """Immutable 4 KiB blocks in one unlinked real file, by number."""

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
        # Numbers no holder refers to, found by the last ``collect``, largest
        # first: ``put`` reuses the smallest ones before it grows the file.
        self._free: list[int] = []
        # What refers to numbers (a server's block maps, a client's page
        # caches), by id: each has ``block_numbers()``; ``collect`` marks
        # theirs live.  Held strongly: which blocks are free must not depend
        # on when the interpreter frees an object.
        self._holders: dict[int, Any] = {}
        self.collect_due = False
        self._written = 0  # blocks put since the last collection
        self._live = 0  # blocks live at the last collection
        self.collections = 0
        self.reused = 0  # blocks ``put`` wrote over free ones
        self.closed_by: str | None = None
        self.failure: StoreError | None = None
        self.on_failure: Callable[[StoreError], None] | None = None
        self._finalizer = weakref.finalize(self, _close, fd)

    def hold(self, holder: Any) -> None:
        """Count ``holder``'s ``block_numbers()`` as live from now on."""
        self._holders.setdefault(id(holder), holder)

    @property
    def used(self) -> int:
        """Bytes of the store's file: every block it ever held, free ones too."""
        return self._blocks * BLOCK

    @property
    def free(self) -> int:
        """Blocks the last collection found free and no ``put`` has reused yet."""
        return len(self._free)

    def put(self, blocks: Sequence[bytes | bytearray | memoryview], what: str) -> list[int]:
        """Write ``blocks`` (each exactly ``BLOCK`` bytes); their numbers, in
        order: free ones first, smallest first, then new ones after the
        file's end.  ``what`` names the file for an error.  No number is
        handed out unless every block was written.

        Raises:
            StoreError: the disk refused, the store would pass its limit, or
                it was closed.
        """
        if self.failure is not None:
            raise self.failure
        if self.closed_by is not None:
            self._closed()
        count = len(blocks)
        free = self._free
        reused = min(count, len(free))
        numbers = free[len(free) - reused:]
        numbers.reverse()
        first, grown = self._blocks, count - reused
        if self.limit is not None and (first + grown) * BLOCK > self.limit:
            self._fail(f"writing {count * BLOCK} bytes of {what} would take the store past "
                       f"World(store_size={self.limit}) (its file holds {first * BLOCK} "
                       f"bytes, {len(free) * BLOCK} of them free)")
        numbers.extend(range(first, first + grown))
        position = 0
        while position < count:  # one pwritev per run of consecutive numbers
            start = numbers[position]
            end = position + 1
            while (end < count and end - position < _IOV_MAX
                   and numbers[end] == start + end - position):
                end += 1
            chunk = blocks[position:end]
            try:
                written = _pwritev(self._fd, chunk, start * BLOCK)
            except OSError as error:
                self._fail(f"writing {len(chunk) * BLOCK} bytes of {what} failed: {error}")
            if written != len(chunk) * BLOCK:  # a short write: the disk filled up
                self._fail(f"writing {len(chunk) * BLOCK} bytes of {what} wrote only "
                           f"{written}: [Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}")
            position = end
        del free[len(free) - reused:]
        self.reused += reused
        self._blocks = first + grown
        self._written += count
        if self._written >= max(_COLLECT_MIN, self._live // 2):
            self.collect_due = True
        return numbers

    def get(self, number: int) -> bytes:
        """Block ``number``'s bytes."""
        return self.get_run(number, 1)

    def get_run(self, first: int, count: int) -> bytes:
        """Blocks ``first`` to ``first+count-1``, joined: one read."""
        if self.closed_by is not None:
            self._closed()
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

    def collect(self) -> int:
        """Find the blocks no holder refers to any more, for ``put`` to reuse;
        how many are free now.

        Called only between two syscalls (``Syscalls._run`` before a call's
        effect, when ``collect_due``): no call is half done then, so every
        number anything will read again is in a holder's map or page (a
        server's block maps, every host's clean, dirty and stale pages).
        Which blocks are free, and so the order they are reused in, follows
        from the run alone.
        """
        self.collect_due = False
        self._written = 0
        live = bytearray(self._blocks)
        for holder in self._holders.values():
            for numbers in holder.block_numbers():
                for number in numbers:
                    if number >= 0:
                        live[number] = 1
        self._live = self._blocks - live.count(0)
        free: list[int] = []
        position = live.find(0)
        while position != -1:
            free.append(position)
            position = live.find(0, position + 1)
        free.reverse()
        self._free = free
        self.collections += 1
        return len(free)

    def close(self, why: str) -> None:
        """Close the store's file now (its space goes back to the disk); any
        later read or write raises ``StoreError`` naming ``why``."""
        if self.closed_by is None:
            self.closed_by = why
            self._finalizer()

    def _closed(self) -> NoReturn:
        raise StoreError(f"the block store of this world was closed ({self.closed_by}): "
                         "its file data is gone; read World.server and run the world "
                         "before World.close()")

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


# A collection is due once this many blocks (1 MiB), or half the blocks
# live at the last collection if more, were written since: it reads every
# holder's numbers once, so its cost stays a constant share of the blocks
# written, and the file stays within about 1.5 times what is live.
_COLLECT_MIN: Final = 256


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

    def numbered(self) -> Iterator[tuple[int, int]]:
        """(index, number) for every entry, by index."""
        for key in sorted(self._chunks):
            base = key << _CHUNK_BITS
            for offset, number in enumerate(self._chunks[key]):
                if number != _ABSENT:
                    yield base + offset, number

    def arrays(self) -> Iterator[array[int]]:
        """The numbers held, as arrays in which -1 is no entry (``collect``)."""
        return iter(self._chunks.values())

    def set_run(self, first: int, numbers: array[int]) -> None:
        """Indexes ``first``, ``first+1``... point at ``numbers`` (a slice
        assignment per array of 1024, not a call per index)."""
        done, total = 0, len(numbers)
        while done < total:
            index = first + done
            key, offset = index >> _CHUNK_BITS, index & (_CHUNK - 1)
            chunk = self._chunks.get(key)
            if chunk is None:
                chunk = self._chunks[key] = array("q", _EMPTY_CHUNK)
            step = min(_CHUNK - offset, total - done)
            self._count += chunk[offset:offset + step].count(_ABSENT)
            chunk[offset:offset + step] = numbers[done:done + step]
            done += step

    def absorb(self, other: NumberMap) -> None:
        """Take every entry of ``other`` (whose indexes are none of ours), and
        leave it empty: an array this map lacks is moved, not copied."""
        for key, theirs in other._chunks.items():
            mine = self._chunks.get(key)
            if mine is None:
                self._chunks[key] = theirs
            else:
                for offset, number in enumerate(theirs):
                    if number != _ABSENT:
                        mine[offset] = number
        self._count += other._count
        other.clear()
