"""One host's page cache: whole pages read, dirty byte ranges written back.

The Linux client never sends a file image.  It reads whole pages (READ, up
to rsize) and keeps, per page, one contiguous dirty byte range (an
``nfs_page`` request); writeback WRITEs exactly those ranges.  So two hosts
writing different pages, or different byte ranges of one page, of one file
both land; a close never shrinks a file; size changes on the server only
through a write past EOF or a SETATTR (docs/nfs-facts.md, "Writes and data
visibility", measured).

The rules, with the kernel functions they follow:

- ``nfs_write_begin`` / ``nfs_want_read_modify_write`` (fs/nfs/file.c): a
  partial write into an uncached page inside EOF reads the page first, but
  only for a descriptor open for reading.
- ``nfs_write_end``: a page that is not up to date is zero-filled around
  the written bytes; a page wholly past EOF becomes up to date that way.
- ``nfs_updatepage`` / ``nfs_can_extend_write`` (fs/nfs/write.c): a write
  into an up-to-date page is extended to the whole page (up to EOF), unless
  the descriptor is O_SYNC/O_DSYNC, the data cache is invalid, or this host
  holds locks on the file other than one whole-file write lock.  This is
  how a writer whose cached size is past another host's records writes its
  zeros over them (the NUL runs of cross-host O_APPEND, measured).
- ``nfs_try_to_update_request``: a write not contiguous with the page's
  dirty range flushes that range first.
- ``nfs_update_inode`` (fs/nfs/inode.c): the cached size follows the
  server's unless writes are pending and the server's is smaller; a foreign
  change invalidates the data cache only while no descriptor on this host
  has the file open for writing; otherwise the invalidation is deferred to
  the next open that finds no other open of the file on this host
  (``nfs_inode_attach_open_context``).  ``nfs_revalidate_mapping`` writes
  back and drops an invalid cache before the next read.
- Writeback before close or fsync happens on the client's own schedule:
  measured 0.6 s to 31 s after the data was written; the delay is drawn
  per dirtying from the host's seeded generator (``Writeback``).
"""

from __future__ import annotations

import heapq
import itertools
import random
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final, cast

from .._engine._clock import NS_PER_S
from ._fsstat import BLOCK
from ._server import ZERO_BLOCK
from ._store import NumberMap

if TYPE_CHECKING:
    from .._engine._clock import VirtualClock
    from ._mount import MountOptions
    from ._server import Server
    from ._store import BlockStore

PAGE_SIZE: Final = 4096
assert PAGE_SIZE == BLOCK  # pages share the server's blocks (Page.data)

# What a host's locks on a file allow (``nfs_can_extend_write``).
LOCKS_NONE: Final = "none"
LOCKS_WHOLE_WRITE: Final = "whole-file write lock"
LOCKS_OTHER: Final = "byte-range or read locks"


# A page never written: zeros, one object for all of them.
_ZERO_PAGE: Final = ZERO_BLOCK

# A page dirty from end to end.
_WHOLE: Final = (0, PAGE_SIZE)

# With a block store, how many dirty pages of a file may hold their bytes in
# memory (16 MiB) before they are written to the store (``FileCache.spilled``).
SPILL_PAGES: Final = 4096


class Page:
    """One cached page: its bytes, whether they are all known, its dirty range.

    ``data`` is copy-on-write: an immutable ``bytes`` shared with the server
    (a page read, or one written back whole) until this host writes into it,
    when ``writable()`` gives the page its own ``bytearray``.  So a file read
    or written on any number of hosts holds its bytes once.  With a block
    store (``World(store=)``) a clean page's ``data`` is the block's number
    in the store instead (an ``int``), read back when a call wants the bytes:
    the same block, which never changes, so a stale page stays stale.
    """

    __slots__ = ("data", "dirty", "uptodate")

    def __init__(self) -> None:
        self.data: bytes | bytearray | int = _ZERO_PAGE
        self.uptodate = False
        self.dirty: tuple[int, int] | None = None

    def writable(self, store: BlockStore | None = None) -> bytearray:
        """The page's own bytes, copied from the shared ones on first write."""
        data = self.data
        if type(data) is bytearray:
            return data
        if type(data) is int:
            assert store is not None  # numbers only come with a store
            data = store.get(data)
        own = self.data = bytearray(data)
        return own


class FileCache:
    """One file's pages on one host, and the size this host believes it has.

    With a block store, a clean, up-to-date page whose bytes are a block in
    the store is kept as that block's number alone, in ``stored`` (8 bytes a
    page, no ``Page``), and so is an up-to-date page dirty from end to end
    whose bytes were written to the store (``spilled``: a file's dirty pages
    go there once more than ``SPILL_PAGES`` of them hold their bytes in
    memory); ``page()`` turns either back into a ``Page`` when a write
    wants one.  A page index is in one of ``pages``, ``stored`` and
    ``spilled`` at most.  ``dirty`` holds the indexes of dirty pages,
    ``spilled`` the others: ``has_dirty`` asks both.
    """

    __slots__ = ("deferred", "dirty", "invalid", "label", "pages", "size", "spill_at",
                 "spilled", "stored", "writeback_due")

    def __init__(self, size: int, label: str, stored: bool = False) -> None:
        self.pages: dict[int, Page] = {}
        self.stored = NumberMap() if stored else None
        self.spilled = NumberMap() if stored else None
        self.spill_at = SPILL_PAGES
        self.dirty: set[int] = set()
        self.size = size
        self.invalid = False
        # NFS_INO_DATA_INVAL_DEFER: a foreign change seen while this host had
        # the file open for writing; the next open that finds no other open
        # of the file here invalidates the data (nfs_inode_attach_open_context).
        self.deferred = False
        self.writeback_due: int | None = None
        self.label = label

    @property
    def has_dirty(self) -> bool:
        """Whether any page of the file is dirty here (spilled ones too)."""
        return bool(self.dirty) or bool(self.spilled)

    def data_at(self, index: int) -> bytes | bytearray | int | None:
        """Page ``index``'s data (a store number for a stored or spilled
        page); None when this host has not got it up to date."""
        page = self.pages.get(index)
        if page is not None:
            return page.data if page.uptodate else None
        stored = self.stored
        if stored is None:
            return None
        number: int | None = stored.get(index)
        if number is None:
            number = cast("NumberMap", self.spilled).get(index)
        return number

    @property
    def holds_any(self) -> bool:
        """Whether this host caches any page of the file (stored ones too)."""
        return bool(self.pages) or bool(self.stored) or bool(self.spilled)

    def holds(self, index: int) -> bool:
        """Whether this host caches anything of page ``index``."""
        return index in self.pages or (self.stored is not None and (
            index in self.stored or index in cast("NumberMap", self.spilled)))

    def page(self, index: int) -> Page:
        """Page ``index`` as a ``Page`` to change, made if there is none."""
        page = self.pages.get(index)
        if page is None:
            page = self.pages[index] = Page()
            stored = self.stored
            if stored is not None:
                number = stored.get(index)
                if number is not None:
                    del stored[index]
                    page.data = number
                    page.uptodate = True
                    return page
                spilled = cast("NumberMap", self.spilled)
                number = spilled.get(index)
                if number is not None:  # dirty from end to end, its bytes in the store
                    del spilled[index]
                    page.data = number
                    page.uptodate = True
                    page.dirty = _WHOLE
                    self.dirty.add(index)
        return page

    def keep(self, index: int, number: int) -> None:
        """Page ``index`` is clean, up to date, and block ``number`` in the store."""
        assert self.stored is not None
        self.pages.pop(index, None)
        self.stored[index] = number

    def drop_pages(self, first: int = 0) -> None:
        """Forget pages ``first`` and after (all of them by default)."""
        if first == 0:
            self.pages.clear()
            if self.stored is not None:
                self.stored.clear()
                cast("NumberMap", self.spilled).clear()
            return
        for index in [i for i in self.pages if i >= first]:
            del self.pages[index]
        for numbers in (self.stored, self.spilled):
            if numbers is not None:
                for index in [i for i in numbers if i >= first]:
                    del numbers[index]

    def block_numbers(self) -> Iterator[Iterable[int]]:
        """The store numbers this cache holds: clean, spilled and ``Page`` objects' data."""
        if self.stored is not None:
            yield from self.stored.arrays()
            yield from cast("NumberMap", self.spilled).arrays()
        yield [page.data for page in self.pages.values() if type(page.data) is int]

    def page_length(self, index: int) -> int:
        """``nfs_page_length``: how many bytes of page ``index`` lie inside the size."""
        return max(0, min(PAGE_SIZE, self.size - index * PAGE_SIZE))


class WritebackQueue:
    """Writebacks due, across all hosts: each lands at the first syscall at or
    after its due time, which no host can tell from landing exactly then
    (nothing observes the server between two syscalls)."""

    def __init__(self) -> None:
        self._due: list[tuple[int, int, Callable[[int], None]]] = []
        self._seq = itertools.count()
        self.next_ns: int | None = None

    def push(self, due_ns: int, land: Callable[[int], None]) -> None:
        heapq.heappush(self._due, (due_ns, next(self._seq), land))
        self.next_ns = self._due[0][0]

    def run_due(self, now_ns: int) -> None:
        due = self._due
        while due and due[0][0] <= now_ns:
            when, _, land = heapq.heappop(due)
            land(when)
        self.next_ns = due[0][0] if due else None


class Writeback:
    """When this host's client writes dirty data back on its own.

    ``delay_s`` draws the delay after a clean file's first dirtying: by
    default uniformly from the kernel profile's measured range with a
    generator seeded from the world's seed and the host's name, so the same
    seed gives the same writebacks.  Exploration may replace it (e.g. with a
    Hypothesis draw).
    """

    def __init__(self, queue: WritebackQueue, clock: VirtualClock,
                 delay_s: Callable[[], float],
                 on_land: Callable[[str, float, tuple[str, ...]], None]) -> None:
        self.queue = queue
        self.clock = clock
        self.delay_s = delay_s
        self.on_land = on_land
        self.alive: Callable[[], bool] = lambda: True


def seeded_delay(seed: int, host: str, span: tuple[float, float]) -> Callable[[], float]:
    """Uniform delays in ``span`` from a generator private to one host."""
    rng = random.Random(f"simfs-writeback:{seed}:{host}")
    low, high = span
    return lambda: rng.uniform(low, high)


def _dirty_bytes(cache: FileCache) -> int:
    """How many bytes a flush of ``cache`` would WRITE now."""
    total = 0
    for index in cache.dirty:
        span = cache.pages[index].dirty
        if span is not None:
            total += span[1] - span[0]
    if cache.spilled is not None:
        total += len(cache.spilled) * PAGE_SIZE
    return total


class PageCacheOps:
    """The data path of ``NfsClient``: read, write, flush, size."""

    server: Server
    clock: VirtualClock
    files: dict[int, FileCache]
    writers: dict[int, int]
    writeback: Writeback | None

    options: MountOptions

    def _rpc(self, name: str, nbytes: int = 0) -> None:
        raise NotImplementedError

    def getattr(self, fileid: int, *, force: bool = False) -> object:
        raise NotImplementedError

    def _own_write(self, fileid: int) -> None:
        raise NotImplementedError

    def transfer_ns(self, nbytes: int) -> int:
        raise NotImplementedError

    def _cached_size(self, fileid: int) -> int:
        raise NotImplementedError

    # -- the cache of one file --------------------------------------------------

    def file_cache(self, fileid: int, label: str = "") -> FileCache:
        cache = self.files.get(fileid)
        if cache is None:
            store = self.server.store
            cache = self.files[fileid] = FileCache(self._cached_size(fileid),
                                                   label or f"fileid {fileid}",
                                                   store is not None)
            if store is not None:
                store.hold(self)
        elif label:
            cache.label = label
        return cache

    def block_numbers(self) -> Iterator[Iterable[int]]:
        """The store numbers this host's page caches hold (``BlockStore.collect``)."""
        for cache in self.files.values():
            yield from cache.block_numbers()

    def _revalidate_mapping(self, fileid: int) -> FileCache:
        """``nfs_revalidate_mapping``: fresh attributes, then drop an invalid cache."""
        self.getattr(fileid)
        cache = self.file_cache(fileid)
        if cache.invalid:
            self.flush(fileid)
            cache.drop_pages()
            cache.invalid = cache.deferred = False  # nfs_invalidate_mapping clears both
        return cache

    def revalidate_size(self, fileid: int) -> int:
        """``nfs_revalidate_file_size``: the size O_APPEND and SEEK_END use,
        from the attribute cache unless it expired."""
        self.getattr(fileid)
        return self.file_cache(fileid).size

    def _fill(self, fileid: int, cache: FileCache, indexes: list[int]) -> None:
        """READ whole pages, one RPC per contiguous run (``nfs_read_folio``)."""
        for index in indexes:
            page = cache.pages.get(index)
            if page is not None and page.dirty is not None:
                self._flush_pages(fileid, cache, [index])  # nfs_wb_folio first
        run: list[int] = []
        for index in [*indexes, -2]:
            if run and index == run[-1] + 1:
                run.append(index)
                continue
            if run:
                # READs of at most rsize each, for pages inside the size this
                # host believes (just revalidated): their replies carry the
                # bytes up to it.
                wanted = len(run) * PAGE_SIZE
                carried = min(wanted, max(0, cache.size - run[0] * PAGE_SIZE))
                if wanted <= self.options.rsize:
                    self._rpc("READ", carried)
                else:
                    self._send_split("READ", wanted, carried, self.options.rsize)
                # The server's blocks themselves: zeros past EOF, never changed
                # in place, so the page shares them until it is written.
                blocks = self.server.read_blocks(fileid, run[0], len(run))
                pages = cache.pages
                for number, block in zip(run, blocks, strict=True):
                    page = pages.get(number)
                    if page is None and type(block) is int:
                        cache.keep(number, block)  # a block in the store: its number alone
                        continue
                    if page is None:
                        page = pages[number] = Page()
                    page.data = block
                    page.uptodate = True
            run = [index]

    # -- read and write ---------------------------------------------------------

    def read_data(self, fileid: int, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset+length)`` as this host sees them, within its size."""
        cache = self._revalidate_mapping(fileid)
        end = min(offset + length, cache.size)
        if offset >= end:
            return b""
        first, last = offset // PAGE_SIZE, (end - 1) // PAGE_SIZE
        pages = cache.pages
        store = self.server.store
        if store is None:
            missing = [i for i in range(first, last + 1)
                       if (page := pages.get(i)) is None or not page.uptodate]
        else:
            missing = [i for i in range(first, last + 1) if cache.data_at(i) is None]
        if missing:
            self._fill(fileid, cache, missing)
        if first == last:
            base = first * PAGE_SIZE
            data = pages[first].data if store is None else cache.data_at(first)
            if type(data) is int:
                assert store is not None  # numbers only come with a store
                data = store.get(data)
            if end - offset == PAGE_SIZE and type(data) is bytes:
                return data  # a whole shared page: immutable, no copy needed
            return bytes(data[offset - base:end - base])  # type: ignore[index]
        # One copy, from the pages themselves (a bytes result is the API's).
        head = offset - first * PAGE_SIZE
        tail = end - last * PAGE_SIZE
        held = ([pages[index].data for index in range(first, last + 1)] if store is None
                else cast("list[bytes | bytearray | int]",  # all up to date now
                          [cache.data_at(index) for index in range(first, last + 1)]))
        # With a store, numbers become their blocks' bytes (a run in one read).
        parts = (cast("list[bytes | bytearray]", held) if store is None
                 else store.resolve(held))
        return b"".join([memoryview(parts[0])[head:], *parts[1:-1],
                         memoryview(parts[-1])[:tail]])

    def write_data(self, fileid: int, offset: int, payload: memoryview, *, readable: bool,
                   sync: bool, locks: str) -> None:
        """Copy ``payload`` into the cache at ``offset`` and mark it dirty."""
        cache = self.file_cache(fileid)
        pages, dirty, stored = cache.pages, cache.dirty, cache.stored
        position, done, total = offset, 0, len(payload)
        while done < total:
            index, start = divmod(position, PAGE_SIZE)
            end = min(PAGE_SIZE, start + total - done)
            page = pages.get(index) if stored is None else cache.page(index)
            if page is None:
                page = pages[index] = Page()
            if end - start == PAGE_SIZE:
                # A whole page: every rule below comes to the same thing (no
                # read first, up to date, dirty from end to end, any earlier
                # dirty range inside it), so take the bytes as they are; the
                # page stays immutable until written again (Page.writable).
                page.data = bytes(payload[done:done + PAGE_SIZE])
                page.uptodate = True
                page.dirty = _WHOLE
                dirty.add(index)
                done += PAGE_SIZE
                position += PAGE_SIZE
                if position > cache.size:
                    cache.size = position
                if stored is not None and len(dirty) >= cache.spill_at:
                    self._spill(cache)
                continue
            page_length = cache.page_length(index)
            if (readable and not page.uptodate and page.dirty is None and page_length
                    and (end < page_length or start)):
                self._fill(fileid, cache, [index])  # read-modify-write
            data = page.writable(self.server.store)
            data[start:end] = payload[done:done + end - start]
            if not page.uptodate:
                if page_length == 0:
                    data[:start] = bytes(start)
                    data[end:] = bytes(PAGE_SIZE - end)
                    page.uptodate = True
                elif end >= page_length:
                    data[end:] = bytes(PAGE_SIZE - end)
                    page.uptodate = start == 0
                else:
                    data[page_length:] = bytes(PAGE_SIZE - page_length)
            low, high = start, end
            if (not sync and page.uptodate and not (cache.invalid and page_length)
                    and locks != LOCKS_OTHER):
                low, high = 0, max(end, page_length)  # nfs_can_extend_write
            if page.dirty is not None:
                old_low, old_high = page.dirty
                if low > old_high or high < old_low:
                    self._flush_pages(fileid, cache, [index])
                else:
                    low, high = min(low, old_low), max(high, old_high)
            page.dirty = (low, high)
            cache.dirty.add(index)
            written_end = index * PAGE_SIZE + end
            if written_end > cache.size:
                cache.size = written_end
            done += end - start
            position += end - start
            if stored is not None and len(dirty) >= cache.spill_at:
                self._spill(cache)
        if sync:
            self.flush(fileid)
        else:
            self._schedule_writeback(fileid, cache)

    # -- writeback --------------------------------------------------------------

    def _schedule_writeback(self, fileid: int, cache: FileCache) -> None:
        writeback = self.writeback
        if writeback is None or cache.writeback_due is not None or not cache.has_dirty:
            return
        due = self.clock.now_ns + round(writeback.delay_s() * NS_PER_S)
        cache.writeback_due = due

        def land(when: int, sending: bool = False) -> None:
            if (self.files.get(fileid) is not cache or cache.writeback_due != when
                    or not writeback.alive()):
                return
            if not sending:
                # The WRITEs start now and take the link's time for the data
                # dirty now: the server has it when the last one arrives.
                cost = self.transfer_ns(_dirty_bytes(cache))
                if cost:
                    cache.writeback_due = when + cost
                    writeback.queue.push(when + cost, lambda at: land(at, True))
                    return
            rpcs = self._background_flush(fileid)
            writeback.on_land(cache.label, when / NS_PER_S, rpcs)

        writeback.queue.push(due, land)

    def _background_flush(self, fileid: int) -> tuple[str, ...]:
        raise NotImplementedError

    def flush(self, fileid: int, *, sync: bool = True) -> None:
        """WRITE every dirty range, and COMMIT what was written unstable.

        ``sync``: a flush the call waits for (close, fsync, a stat of the
        file, a truncate: ``WB_SYNC_ALL``, so ``FLUSH_COND_STABLE`` in
        fs/nfs/write.c ``wb_priority``).  Its WRITEs are ``FILE_SYNC`` and
        need no COMMIT while each run fits in one RPC (fs/nfs/pagelist.c
        ``nfs_generic_pgio`` drops the flag once a run is split, or an
        unstable WRITE awaits its COMMIT).  Measured in the VM, v3 and
        v4.1 alike (``compose/probe_stable_writes.py``, docs/nfs-facts.md):
        4 KiB then close, fsync or stat, exactly wsize, and two separate
        4 KiB ranges sent no COMMIT; wsize plus a page sent two WRITEs and
        one COMMIT.  The client's own background writeback is unstable
        (``WB_SYNC_NONE``), committed when written (``nfs_write_inode``).
        """
        cache = self.files.get(fileid)
        if cache is None or not cache.has_dirty:
            return
        if cache.stored is None:
            unstable = self._flush_pages(fileid, cache, sorted(cache.dirty))
        else:
            unstable = self._flush_stored(fileid, cache, None)
        if unstable or not sync:
            self._rpc("COMMIT")
        cache.writeback_due = None

    def _flush_pages(self, fileid: int, cache: FileCache, indexes: list[int]) -> bool:
        """One WRITE per run of dirty ranges that join up across page
        boundaries; whether any was written unstable (a COMMIT is owed): a
        run split over several RPCs, and every run after it (``flush``).

        A run is handed over as the pages' own pieces, not joined: a page
        dirty from end to end is frozen into ``bytes`` that the server keeps
        as its block and this cache keeps as the page (shared, copy-on-write).
        With a block store, ``_flush_stored`` does the same with numbers.
        """
        if cache.stored is not None:
            return self._flush_stored(fileid, cache, indexes)
        runs: list[tuple[int, list[bytes | memoryview]]] = []
        run_end = -1
        for index in indexes:
            page = cache.pages[index]
            if page.dirty is None:
                continue
            low, high = page.dirty
            start = index * PAGE_SIZE + low
            piece: bytes | memoryview
            if low == 0 and high == PAGE_SIZE:
                piece = page.data = bytes(cast("bytes | bytearray", page.data))
            else:
                piece = memoryview(cast("bytearray", page.data))[low:high]
            if runs and run_end == start:
                runs[-1][1].append(piece)
            else:
                runs.append((start, [piece]))
            run_end = start + high - low
        for index in indexes:
            maybe = cache.pages.get(index)
            if maybe is not None and maybe.dirty is not None:
                maybe.dirty = None
                cache.dirty.discard(index)
        unstable = False
        for start, pieces in runs:
            unstable |= self._send_write(sum(len(piece) for piece in pieces))
            self.server.write_pieces(fileid, start, pieces, cache.label)
        if runs:
            self._own_write(fileid)
        return unstable

    def _send_write(self, size: int) -> bool:
        """The RPCs of one run's WRITE; whether it was split (a COMMIT is owed)."""
        if size <= self.options.wsize:
            self._rpc("WRITE", size)
            return False
        self._send_split("WRITE", size, size, self.options.wsize)
        return True

    def _spill(self, cache: FileCache) -> None:
        """With a block store: write the bytes of every dirty page of ``cache``
        that holds them in memory to the store (one ``pwritev`` per run of
        numbers).  A page dirty from end to end and up to date becomes its
        number in ``spilled`` (no ``Page``); any other keeps its ``Page``,
        whose data becomes the number.  Nothing the model sees changes: the
        pages stay dirty, their WRITEs go out when they would have."""
        store = cast("BlockStore", self.server.store)
        pages, dirty = cache.pages, cache.dirty
        spilled = cast("NumberMap", cache.spilled)
        chosen = [index for index in sorted(dirty) if type(pages[index].data) is not int]
        if chosen:
            numbers = store.put([cast("bytes | bytearray", pages[index].data)
                                 for index in chosen], cache.label)
            for index, number in zip(chosen, numbers, strict=True):
                page = pages[index]
                if page.dirty == _WHOLE and page.uptodate:
                    del pages[index]
                    dirty.discard(index)
                    spilled[index] = number
                else:
                    page.data = number
        cache.spill_at = len(dirty) + SPILL_PAGES

    def _flush_stored(self, fileid: int, cache: FileCache, indexes: list[int] | None) -> bool:
        """``_flush_pages`` with a block store, for pages ``indexes`` (None:
        every dirty one): the same runs, RPCs and server changes, with
        whole pages as store numbers.

        Every page dirty from end to end is written to the store first, in
        one go (a failure there changes nothing); then each run goes to the
        server as it is found, its whole pages as an ``array`` of numbers
        (8 bytes a page, so a 10 GiB run costs 21 MB, not its size), its
        first and last page's dirty bytes as they are.  Afterwards an up to
        date page is clean and its number alone (``stored``), the same
        block as the server's; a page dirty from end to end that was never
        read keeps its ``Page`` (not up to date, as without a store).
        """
        store = cast("BlockStore", self.server.store)
        pages, dirty = cache.pages, cache.dirty
        spilled, stored = cast("NumberMap", cache.spilled), cast("NumberMap", cache.stored)
        chosen = sorted(dirty) if indexes is None else indexes
        frozen = [index for index in chosen
                  if index in dirty and pages[index].dirty == _WHOLE
                  and type(pages[index].data) is not int]
        if frozen:
            numbers = store.put([cast("bytes | bytearray", pages[index].data)
                                 for index in frozen], cache.label)
            for index, number in zip(frozen, numbers, strict=True):
                pages[index].data = number
        partial = [(index, -1) for index in chosen if index in dirty]
        whole: Iterable[tuple[int, int]] = (
            spilled.numbered() if indexes is None
            else [(index, spilled[index]) for index in indexes if index in spilled])
        unstable = False
        sent = False
        # The run being gathered: its offset, pieces, whole pages' numbers, end.
        start = run_end = -1
        pieces: list[bytes | memoryview | array[int]] = []
        numbers_run = array("q")
        cleaned: list[int] = []  # Page indexes of the runs sent

        def send() -> None:
            nonlocal unstable, sent, pieces, numbers_run
            if numbers_run:
                pieces.insert(1 if pieces and start % PAGE_SIZE else 0, numbers_run)
            size = sum(len(piece) * (PAGE_SIZE if type(piece) is array else 1)
                       for piece in pieces)
            unstable |= self._send_write(size)
            self.server.write_pieces(fileid, start, pieces, cache.label)
            sent = True
            pieces, numbers_run = [], array("q")

        for index, number in heapq.merge(partial, whole):
            page = None if number >= 0 else pages[index]
            if page is None or page.dirty == _WHOLE:  # spilled, or a Page's number
                if page is not None:
                    number = cast("int", page.data)
                at = index * PAGE_SIZE
                if not (pieces or numbers_run) or run_end != at:
                    if pieces or numbers_run:
                        send()
                    start = at
                numbers_run.append(number)
                run_end = at + PAGE_SIZE
            else:
                if page.dirty is None:
                    continue
                low, high = page.dirty
                at = index * PAGE_SIZE + low
                data = page.data
                piece = memoryview(store.get(data) if type(data) is int
                                   else cast("bytearray", data))[low:high]
                if (pieces or numbers_run) and run_end == at:
                    pieces.append(piece)  # the run's last page (it ends inside it)
                else:
                    if pieces or numbers_run:
                        send()
                    start = at
                    pieces.append(piece)
                run_end = at + high - low
            if page is not None:
                cleaned.append(index)
        if pieces or numbers_run:
            send()
        for index in cleaned:
            page = pages[index]
            whole_page = page.dirty == _WHOLE
            page.dirty = None
            dirty.discard(index)
            if whole_page and page.uptodate:
                cache.keep(index, cast("int", page.data))  # clean: its number alone
        if indexes is None:
            if spilled:
                stored.absorb(spilled)  # clean now: the server's blocks, by number
            else:
                spilled.clear()  # arrays emptied by page() go too
        else:
            for index, number in whole:
                del spilled[index]
                stored[index] = number
        cache.spill_at = len(dirty) + SPILL_PAGES
        if sent:
            self._own_write(fileid)
        return unstable

    def _send_split(self, name: str, span: int, carried: int, limit: int) -> None:
        """The RPCs one contiguous READ or WRITE of ``span`` bytes takes: one
        per ``limit`` (the mount's rsize or wsize) bytes, as
        ``nfs_generic_pg_test`` (fs/nfs/pagelist.c) ends a request at the
        mount's size; ``carried`` bytes of file data among them."""
        count = max(1, -(-span // limit))
        for number in range(count):
            piece = min(limit, carried - number * limit)
            self._rpc(name, piece if piece > 0 else 0)
