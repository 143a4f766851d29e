"""The NFS server's truth: one export's namespace, data and attributes.

The server knows nothing of clients' caches or open files: NFSv3 is
stateless, which is why silly rename exists at all (docs/design.md, "The NFS
model").  Every modification bumps a change counter; clients compare it to what
they cached, the way the Linux client compares mtime/ctime/size for NFSv3.

File ids are allocated in order, so the same run gives the same ids and the
same ``.nfs`` names.  A removed inode (last link gone) is forgotten: any
later use of its file id is ``ESTALE``, unless something still holds it
open on the server (``opened``): an NFSv4.1 client's OPEN state, which knfsd
keeps as an open file of the exported filesystem, so the inode lives on with
no name until the last CLOSE (measured, docs/nfs-facts.md, "NFSv4.1 and
4.2"), as a local disk's does until the last close.
"""

from __future__ import annotations

import errno
import stat as stat_mod
from array import array
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias, cast

from .._engine._clock import VirtualClock
from .._errors import simulated_oserror
from ._delegations import Delegations
from ._fsstat import BLOCK, FAST_SYMLINK_MAX, FsStat, fsstat
from ._store import NumberMap

if TYPE_CHECKING:
    from ._store import BlockStore

FILE: Final = "f"
DIR: Final = "d"
LINK: Final = "l"  # NF3LNK: a symbolic link, its target text held as its data

EXPORT_DEV: Final = 0x4E465333  # st_dev of every file in the export ("NFS3")
_DAY_NS: Final = 24 * 3600 * 1_000_000_000
# The server's name length (PATHCONF's name_max: knfsd passes on ext4's 255
# bytes; /proc/mounts shows namlen=255).  ``nfs_lookup`` (fs/nfs/dir.c) fails
# a longer name with ENAMETOOLONG before anything else, a create's, rename
# target's or removal's lookup included, and sends no RPC; the server's own
# procedures refuse one too (lookup_one_len), so no cache can hold one.
NAME_MAX: Final = 255


def check_name_length(name: str) -> None:
    """ENAMETOOLONG for a name of more than NAME_MAX bytes, as the client encodes it."""
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX:
        raise simulated_oserror(errno.ENAMETOOLONG)


@dataclass(frozen=True, slots=True)
class Attrs:
    """An attribute snapshot, as a GETATTR or a post-op attribute returns it."""

    fileid: int
    kind: str
    size: int
    mode: int
    nlink: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    change: int
    uid: int = 0  # every file is root's until a chown (the simulated processes run as root)
    gid: int = 0
    used: int = 0  # fattr3 "used": bytes the server's filesystem allocated (st_blocks * 512)

    @property
    def is_dir(self) -> bool:
        """Whether these are a directory's attributes."""
        return self.kind == DIR

    @property
    def is_link(self) -> bool:
        """Whether these are a symbolic link's attributes (``S_IFLNK``)."""
        return self.kind == LINK


_KIND_BITS: Final = {FILE: stat_mod.S_IFREG, DIR: stat_mod.S_IFDIR, LINK: stat_mod.S_IFLNK}


# A hole's bytes, and every block past EOF: one object shared by every reader.
ZERO_BLOCK: Final = bytes(BLOCK)

# A block of a file's data: its bytes, or with ``World(store=)`` its number
# in the block store (``_store``), read back when a call wants the bytes.
Block: TypeAlias = bytes | int


class Inode:
    """One file, directory or symbolic link on the server.

    A file's data is its allocated blocks, by index: each an immutable
    ``bytes`` of exactly ``BLOCK`` bytes (zeros past EOF), which hosts'
    page caches share rather than copy (``_pagecache``); a hole has no
    entry and costs nothing, as on the server's ext4.  A WRITE replaces the
    blocks it touches with new objects, so a block once handed out never
    changes under its holder.  With a block store (``blockstore``) a block
    is its number there instead, written once and never changed either.
    """

    __slots__ = ("atime_ns", "blocks", "blockstore", "change", "ctime_ns", "entries",
                 "fileid", "gid", "kind", "mode", "mtime_ns", "nlink", "size", "target", "uid")

    def __init__(self, fileid: int, kind: str, mode: int, now_ns: int, change: int,
                 blockstore: BlockStore | None = None) -> None:
        self.fileid = fileid
        self.kind = kind
        self.mode = mode
        self.nlink = 2 if kind == DIR else 1
        self.size = 0
        self.target = b""  # a symbolic link's target
        self.entries: dict[str, Inode] = {}
        self.atime_ns = self.mtime_ns = self.ctime_ns = now_ns
        self.change = change
        self.uid = self.gid = 0
        # The file's data blocks the server's ext4 allocated, by index: those
        # a WRITE touched; a hole a truncate or a seek left has none.
        self.blockstore = blockstore
        self.blocks = self.no_blocks()

    def no_blocks(self) -> MutableMapping[int, Block]:
        """An empty block map: a dict, or with a store a ``NumberMap`` (8 bytes a block)."""
        return {} if self.blockstore is None else NumberMap()

    def _load(self, block: Block) -> bytes:
        """A block's bytes, read from the store when it is a number there."""
        if type(block) is bytes:
            return block
        assert self.blockstore is not None and type(block) is int
        return self.blockstore.get(block)

    def used(self) -> int:
        """The bytes this inode takes on the server's disk (``_fsstat``'s rules)."""
        if self.kind == DIR:
            return BLOCK
        if self.kind == LINK:
            length = len(self.target)
            return 0 if length <= FAST_SYMLINK_MAX else -(-length // BLOCK) * BLOCK
        return len(self.blocks) * BLOCK

    def contents(self, offset: int, count: int) -> bytes:
        """Bytes ``[offset, offset+count)`` of a file, short at EOF, holes as zeros."""
        end = min(offset + count, self.size)
        if offset >= end:
            return b""
        first, last = offset // BLOCK, (end - 1) // BLOCK
        blocks = self.blocks
        if first == last:
            base = first * BLOCK
            block = self._load(blocks.get(first, ZERO_BLOCK))
            return block if end - offset == BLOCK else block[offset - base:end - base]
        held = [blocks.get(index, ZERO_BLOCK) for index in range(first, last + 1)]
        # With a store, numbers become their blocks' bytes (a run in one read).
        items = (cast("list[bytes]", held) if self.blockstore is None
                 else self.blockstore.resolve(held))
        return b"".join([memoryview(item)[
            max(offset - index * BLOCK, 0):min(end - index * BLOCK, BLOCK)]
            for index, item in enumerate(items, first)])

    def store(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` at ``offset`` into the blocks it touches (each allocated)."""
        view = memoryview(data).cast("B")
        self.commit(*self.merged(offset, view))
        self.size = max(self.size, offset + len(view))

    def merged(self, offset: int, view: memoryview
               ) -> tuple[list[int], list[bytes | bytearray | memoryview]]:
        """The blocks a write of ``view`` at ``offset`` touches, by index, and
        each one's new bytes; nothing changes until ``commit``."""
        blocks = self.blocks
        in_memory = self.blockstore is None
        indexes: list[int] = []
        pieces: list[bytes | bytearray | memoryview] = []
        position, done, total = offset, 0, len(view)
        while done < total:
            index, start = divmod(position, BLOCK)
            stop = min(BLOCK, start + total - done)
            block: bytes | bytearray | memoryview
            if start == 0 and stop == BLOCK:
                block = view[done:done + BLOCK]
                if in_memory:
                    # A page handed over whole is kept as it is, shared with
                    # the page cache that wrote it (_pagecache's flush freezes it).
                    whole = block.obj
                    block = whole if type(whole) is bytes and len(whole) == BLOCK \
                        else bytes(block)
            else:
                buffer = bytearray(self._load(blocks.get(index, ZERO_BLOCK)))
                buffer[start:stop] = view[done:done + stop - start]
                block = bytes(buffer) if in_memory else buffer
            indexes.append(index)
            pieces.append(block)
            done += stop - start
            position += stop - start
        return indexes, pieces

    def commit(self, indexes: list[int], pieces: list[bytes | bytearray | memoryview],
               what: str = "") -> None:
        """Point blocks ``indexes`` at ``pieces`` (``merged``'s): in memory as
        they are (``bytes``), or written to the store first, all or none
        (``what`` names the file for the store's error)."""
        blocks = self.blocks
        if self.blockstore is None:
            for index, piece in zip(indexes, pieces, strict=True):
                blocks[index] = piece  # type: ignore[assignment]  # bytes in memory
            return
        if indexes:
            numbers = self.blockstore.put(pieces, what or f"fileid {self.fileid}")
            for index, number in zip(indexes, numbers, strict=True):
                blocks[index] = number

    def truncate(self, size: int) -> None:
        """Cut or extend to ``size``: blocks past it go, the last one's tail
        becomes zeros, and an extension is a hole (no block allocated)."""
        if size < self.size:
            kept = -(-size // BLOCK)
            blocks = self.blocks
            tail = size % BLOCK
            if tail and kept - 1 in blocks:
                self.commit([kept - 1], [self._load(blocks[kept - 1])[:tail]
                                         + bytes(BLOCK - tail)])
            for index in [index for index in blocks if index >= kept]:
                del blocks[index]
        self.size = size

    def attrs(self) -> Attrs:
        # A symlink's size is its target's length, as lstat reports on Linux.
        size = 4096 if self.kind == DIR else len(self.target) if self.kind == LINK else self.size
        return Attrs(self.fileid, self.kind, size, _KIND_BITS[self.kind] | self.mode, self.nlink,
                     self.atime_ns, self.mtime_ns, self.ctime_ns, self.change, self.uid,
                     self.gid, self.used())


class Server:
    """The exported filesystem; every method is one NFSv3 procedure's effect."""

    def __init__(self, clock: VirtualClock, first_fileid: int = 2,
                 store: BlockStore | None = None) -> None:
        self._clock = clock
        # Where files' data lives (None: in memory, as bytes blocks).
        self.store = store
        self._next_fileid = first_fileid
        self._change = 0
        self.inodes: dict[int, Inode] = {}
        self.root = self._new_inode(DIR, 0o755)
        # fileid -> opens held on the server (NFSv4 OPEN state, a local
        # disk's descriptors); an unlinked inode with some stays, nameless.
        self.open_refs: dict[int, int] = {}
        self._orphans: dict[int, Inode] = {}
        # NFSv4.x read delegations (simfs/_nfs/_delegations.py).
        self.delegations = Delegations()
        if store is not None:
            store.hold(self)

    def block_numbers(self) -> Iterator[Iterable[int]]:
        """The store numbers every file's block map holds (``BlockStore.collect``)."""
        for inode in self.inodes.values():
            blocks = inode.blocks
            if isinstance(blocks, NumberMap):
                yield from blocks.arrays()

    # -- bookkeeping -------------------------------------------------------

    def _now(self) -> int:
        return self._clock.wall_ns

    def _new_inode(self, kind: str, mode: int) -> Inode:
        self._change += 1
        inode = Inode(self._next_fileid, kind, mode, self._now(), self._change, self.store)
        self._next_fileid += 1
        self.inodes[inode.fileid] = inode
        return inode

    def _touch(self, inode: Inode, *, data: bool = True) -> None:
        """Record a modification: mtime (for data/entries) and ctime move, change bumps."""
        now = self._now()
        if data:
            inode.mtime_ns = now
        inode.ctime_ns = now
        self._change += 1
        inode.change = self._change

    def _accessed(self, inode: Inode) -> None:
        """A READ or READDIR: the exported filesystem is mounted relatime, so
        its atime moves when not newer than its mtime or ctime, or a day old
        (``relatime_need_update``, fs/inode.c).  Not a change: clients' caches
        stand (knfsd, measured in the VM: the reading host's post-op
        attributes, and the other host's next GETATTR, show it)."""
        now = self._now()
        if (inode.atime_ns <= inode.mtime_ns or inode.atime_ns <= inode.ctime_ns
                or now - inode.atime_ns >= _DAY_NS):
            inode.atime_ns = now

    def _live(self, fileid: int) -> Inode:
        inode = self.inodes.get(fileid)
        if inode is None:
            raise simulated_oserror(errno.ESTALE)
        return inode

    def _dir(self, fileid: int) -> Inode:
        inode = self._live(fileid)
        if inode.kind != DIR:
            raise simulated_oserror(errno.ENOTDIR)
        return inode

    def _unlink_inode(self, inode: Inode) -> None:
        inode.nlink -= 2 if inode.kind == DIR else 1
        self._touch(inode, data=False)
        if inode.nlink <= 0:
            if self.open_refs.get(inode.fileid):
                self._orphans[inode.fileid] = inode  # freed at the last close
            else:
                del self.inodes[inode.fileid]

    def opened(self, fileid: int) -> None:
        """One more open held on the server (an NFSv4 OPEN, a local descriptor)."""
        self.open_refs[fileid] = self.open_refs.get(fileid, 0) + 1

    def orphan_ids(self) -> list[int]:
        """File ids with no name left, kept for the opens that still hold them."""
        return sorted(self._orphans)

    def closed(self, fileid: int) -> None:
        """One open fewer; the last one frees an inode that lost its last name."""
        count = self.open_refs.get(fileid, 0) - 1
        if count > 0:
            self.open_refs[fileid] = count
            return
        self.open_refs.pop(fileid, None)
        if self._orphans.pop(fileid, None) is not None:
            self.inodes.pop(fileid, None)

    # -- procedures --------------------------------------------------------

    def getattr(self, fileid: int) -> Attrs:
        return self._live(fileid).attrs()

    def lookup(self, dir_id: int, name: str) -> Attrs | None:
        entry = self._dir(dir_id).entries.get(name)
        return None if entry is None else entry.attrs()

    def create(self, dir_id: int, name: str, *, exclusive: bool, mode: int) -> tuple[Attrs, bool]:
        """CREATE: EXCLUSIVE fails on an existing name; UNCHECKED returns it (RFC 1813 3.3.8)."""
        check_name_length(name)
        parent = self._dir(dir_id)
        existing = parent.entries.get(name)
        if existing is not None:
            if exclusive:
                raise simulated_oserror(errno.EEXIST)
            if existing.kind == DIR:
                raise simulated_oserror(errno.EISDIR)
            return existing.attrs(), False
        inode = self._new_inode(FILE, mode & 0o7777)
        parent.entries[name] = inode
        self._touch(parent)
        return inode.attrs(), True

    def mkdir(self, dir_id: int, name: str, mode: int) -> Attrs:
        check_name_length(name)
        parent = self._dir(dir_id)
        if name in parent.entries:
            raise simulated_oserror(errno.EEXIST)
        inode = self._new_inode(DIR, mode & 0o7777)
        parent.entries[name] = inode
        parent.nlink += 1
        self._touch(parent)
        return inode.attrs()

    def remove(self, dir_id: int, name: str) -> None:
        parent = self._dir(dir_id)
        inode = parent.entries.get(name)
        if inode is None:
            raise simulated_oserror(errno.ENOENT)
        if inode.kind == DIR:
            raise simulated_oserror(errno.EISDIR)
        del parent.entries[name]
        self._touch(parent)
        self._unlink_inode(inode)

    def rmdir(self, dir_id: int, name: str) -> None:
        parent = self._dir(dir_id)
        inode = parent.entries.get(name)
        if inode is None:
            raise simulated_oserror(errno.ENOENT)
        if inode.kind != DIR:
            raise simulated_oserror(errno.ENOTDIR)
        if inode.entries:
            # A leftover .nfsXXXX entry makes rmdir fail exactly like this
            # (docs/nfs-facts.md, "Silly rename": os.rmdir next to a busy .nfs
            # file gives ENOTEMPTY).
            raise simulated_oserror(errno.ENOTEMPTY)
        del parent.entries[name]
        parent.nlink -= 1
        self._touch(parent)
        self._unlink_inode(inode)

    def rename(self, from_dir: int, from_name: str, to_dir: int, to_name: str) -> None:
        """RENAME: atomically replaces a file target, or an empty directory target."""
        check_name_length(to_name)
        source_parent = self._dir(from_dir)
        target_parent = self._dir(to_dir)
        inode = source_parent.entries.get(from_name)
        if inode is None:
            raise simulated_oserror(errno.ENOENT)
        if inode.kind == DIR and self._is_within(target_parent, inode):
            raise simulated_oserror(errno.EINVAL)
        target = target_parent.entries.get(to_name)
        if target is inode:
            return
        if target is not None:
            if target.kind == DIR and inode.kind != DIR:
                raise simulated_oserror(errno.EISDIR)
            if target.kind != DIR and inode.kind == DIR:
                raise simulated_oserror(errno.ENOTDIR)
            if target.kind == DIR and target.entries:
                raise simulated_oserror(errno.ENOTEMPTY)
        del source_parent.entries[from_name]
        if target is not None:
            if target.kind == DIR:
                target_parent.nlink -= 1
            self._unlink_inode(target)
        target_parent.entries[to_name] = inode
        if inode.kind == DIR and source_parent is not target_parent:
            source_parent.nlink -= 1
            target_parent.nlink += 1
        self._touch(source_parent)
        if target_parent is not source_parent:
            self._touch(target_parent)
        self._touch(inode, data=False)

    def _is_within(self, directory: Inode, ancestor: Inode) -> bool:
        """Whether ``directory`` is ``ancestor`` or lies below it (a rename loop)."""
        stack = [ancestor]
        while stack:
            node = stack.pop()
            if node is directory:
                return True
            stack.extend(child for child in node.entries.values() if child.kind == DIR)
        return False

    def link(self, fileid: int, dir_id: int, name: str) -> Attrs:
        check_name_length(name)
        inode = self._live(fileid)
        parent = self._dir(dir_id)
        if inode.kind == DIR:
            raise simulated_oserror(errno.EPERM)
        if name in parent.entries:
            raise simulated_oserror(errno.EEXIST)
        parent.entries[name] = inode
        inode.nlink += 1
        self._touch(parent)
        self._touch(inode, data=False)
        return inode.attrs()

    def symlink(self, dir_id: int, name: str, target: str) -> Attrs:
        """SYMLINK: a new link holding ``target`` verbatim; the target need not
        exist, and an existing name is EEXIST (RFC 1813 3.3.10).  Links are
        mode 0777 on Linux whatever the umask."""
        check_name_length(name)
        parent = self._dir(dir_id)
        if name in parent.entries:
            raise simulated_oserror(errno.EEXIST)
        inode = self._new_inode(LINK, 0o777)
        inode.target = target.encode("utf-8", "surrogateescape")
        parent.entries[name] = inode
        self._touch(parent)
        return inode.attrs()

    def readlink(self, fileid: int) -> str:
        """READLINK: a link's target; anything else is EINVAL (RFC 1813 3.3.5)."""
        inode = self._live(fileid)
        if inode.kind != LINK:
            raise simulated_oserror(errno.EINVAL)
        return inode.target.decode("utf-8", "surrogateescape")

    def read(self, fileid: int) -> bytes:
        inode = self._live(fileid)
        if inode.kind == DIR:
            raise simulated_oserror(errno.EISDIR)
        if inode.kind == LINK:
            return inode.target
        return inode.contents(0, inode.size)

    def read_range(self, fileid: int, offset: int, count: int) -> bytes:
        """READ: up to ``count`` bytes from ``offset`` (short at EOF)."""
        inode = self._live(fileid)
        if inode.kind == DIR:
            raise simulated_oserror(errno.EISDIR)
        self._accessed(inode)
        if inode.kind == LINK:
            return inode.target[offset:offset + count]
        return inode.contents(offset, count)

    def read_blocks(self, fileid: int, first: int, count: int) -> list[Block]:
        """READ of whole blocks ``first`` to ``first+count-1``: the server's own
        block objects, shared, not copied (store numbers with a store); a hole
        or a block past EOF is ``ZERO_BLOCK`` (what a short READ leaves a
        client to zero-fill)."""
        inode = self._live(fileid)
        if inode.kind == DIR:
            raise simulated_oserror(errno.EISDIR)
        self._accessed(inode)
        if inode.kind == LINK:
            data = inode.target
            return [data[index * BLOCK:(index + 1) * BLOCK].ljust(BLOCK, b"\0")
                    for index in range(first, first + count)]
        blocks = inode.blocks
        return [blocks.get(index, ZERO_BLOCK) for index in range(first, first + count)]

    def write_range(self, fileid: int, offset: int, data: bytes | bytearray | memoryview) -> Attrs:
        """WRITE of one byte range: a write past EOF leaves zeros before it
        (RFC 1813 3.3.7); nothing else changes the size."""
        inode = self._live(fileid)
        if inode.kind == DIR:
            raise simulated_oserror(errno.EISDIR)
        self._write(inode, offset, data)
        self._touch(inode)
        return inode.attrs()

    def write_pieces(self, fileid: int, offset: int,
                     pieces: Sequence[bytes | bytearray | memoryview | int | array[int]],
                     what: str = "") -> Attrs:
        """One WRITE of the contiguous ``pieces`` from ``offset`` (a client's
        run of dirty pages), without joining them into one buffer first.  A
        piece that is an ``int`` is a whole page the client already wrote to
        the store (its number there), an ``array`` of them whole pages one
        after another; with a store, the WRITE lands whole
        or, when the store fails, not at all (``what``: the file's name for
        the store's error)."""
        inode = self._live(fileid)
        if inode.kind == DIR:
            raise simulated_oserror(errno.EISDIR)
        if inode.blockstore is not None and inode.kind == FILE:
            self._write_stored(inode, offset, pieces, what)
            self._touch(inode)
            return inode.attrs()
        blocks = inode.blocks
        for piece in pieces:
            assert not isinstance(piece, int | array)  # numbers only come with a store
            if type(piece) is bytes and len(piece) == BLOCK and not offset % BLOCK \
                    and inode.kind == FILE:
                blocks[offset // BLOCK] = piece  # a frozen page: kept, not copied
                offset += BLOCK
                if offset > inode.size:
                    inode.size = offset
                continue
            self._write(inode, offset, piece)
            offset += len(piece)
        self._touch(inode)
        return inode.attrs()

    @staticmethod
    def _write_stored(inode: Inode, offset: int,
                      pieces: Sequence[bytes | bytearray | memoryview | int | array[int]],
                      what: str) -> None:
        """``write_pieces`` with a store: every new block written, then the map."""
        stored: list[tuple[int, array[int]]] = []
        indexes: list[int] = []
        merged: list[bytes | bytearray | memoryview] = []
        for piece in pieces:
            if type(piece) is int:  # a whole page already in the store
                stored.append((offset // BLOCK, array("q", (piece,))))
                offset += BLOCK
                continue
            if type(piece) is array:  # whole pages, one after another
                stored.append((offset // BLOCK, piece))
                offset += BLOCK * len(piece)
                continue
            view = memoryview(piece).cast("B")  # type: ignore[arg-type]
            more, blocks = inode.merged(offset, view)
            indexes += more
            merged += blocks
            offset += len(view)
        inode.commit(indexes, merged, what)  # the one part that can fail: first
        numbers = inode.blocks
        assert isinstance(numbers, NumberMap)  # a store's file maps numbers
        for first, run in stored:
            numbers.set_run(first, run)
        if offset > inode.size:
            inode.size = offset

    @staticmethod
    def _write(inode: Inode, offset: int, data: bytes | bytearray | memoryview) -> None:
        if inode.kind == LINK:  # never a client's: a link is not opened for writing
            buffer = bytearray(inode.target)
            if offset > len(buffer):
                buffer.extend(bytes(offset - len(buffer)))
            buffer[offset:offset + len(data)] = data
            inode.target = bytes(buffer)
            return
        if len(data):
            inode.store(offset, data)
        elif offset > inode.size:
            inode.size = offset

    def write(self, fileid: int, data: bytes | bytearray) -> Attrs:
        """Replace the whole content (the server view's test helper; clients WRITE ranges)."""
        inode = self._live(fileid)
        if inode.kind == LINK:
            if inode.target != data:
                inode.target = bytes(data)
                self._touch(inode)
            return inode.attrs()
        if inode.contents(0, inode.size) != data:
            inode.blocks = inode.no_blocks()
            inode.size = 0
            inode.store(0, data)
            self._touch(inode)
        return inode.attrs()

    def setattr(self, fileid: int, *, size: int | None = None, mode: int | None = None,
                atime_ns: int | None = None, mtime_ns: int | None = None,
                uid: int | None = None, gid: int | None = None) -> Attrs:
        inode = self._live(fileid)
        # The export is no_root_squash (compose/, the VM runner): root's
        # chown is the server's to carry out, on a link too (lchown).
        if uid is not None:
            inode.uid = uid
        if gid is not None:
            inode.gid = gid
        if (uid is not None or gid is not None) and inode.kind != DIR:
            # chown(2): a file's set-user-ID bit goes, and its set-group-ID
            # bit when group-executable, even for root (Linux >= 2.2.13);
            # knfsd asks the same (nfsd_sanitize_attrs).
            inode.mode &= ~stat_mod.S_ISUID
            if inode.mode & stat_mod.S_IXGRP:
                inode.mode &= ~stat_mod.S_ISGID
        if size is not None:
            if inode.kind == DIR:
                raise simulated_oserror(errno.EISDIR)
            if inode.kind == LINK:
                inode.target = inode.target[:size].ljust(size, b"\0")
            else:
                inode.truncate(size)
        if mode is not None:
            inode.mode = mode & 0o7777
        self._touch(inode, data=size is not None)
        if atime_ns is not None:
            inode.atime_ns = atime_ns
        if mtime_ns is not None:
            inode.mtime_ns = mtime_ns
        return inode.attrs()

    def fsstat(self) -> FsStat:
        """FSSTAT: the filesystem's space and inodes, orphaned files included."""
        used = sum(inode.used() for inode in self.inodes.values()) // BLOCK
        return fsstat(used, len(self.inodes))

    def readdir(self, dir_id: int, *, accessed: bool = True) -> list[tuple[str, Attrs]]:
        """READDIRPLUS: names in creation order (deterministic), with attributes.
        ``accessed=False``: a look from outside (``ServerView``), not a client's."""
        directory = self._dir(dir_id)
        if accessed:
            self._accessed(directory)
        return [(name, inode.attrs()) for name, inode in directory.entries.items()]
