"""A host's local disk: the server's file tree behind a client with no caches.

``/tmp``, ``/var/tmp``, the home directory and ``World.host(local=)`` scratch
mounts are filesystems of one host, seen by no other.  With one client and
no other writer an NFS client's caches are invisible, except where NFS itself
differs from a local filesystem; so a local disk reuses the server's file
tree (``Server``) and the client (``NfsClient``) with those differences
taken out, instead of being a second filesystem:

- no RPCs: nothing is recorded in the trace's RPC column, no ``rpc_latency``
  is paid, no RPC counts move;
- no caches to go stale: the client is mounted ``noac,lookupcache=none``, so
  every step asks the tree, and writes land at once (``noac`` writes are
  synchronous): the page cache of a local filesystem is coherent with it;
- no silly rename: unlinking an open file removes its name at once, and the
  inode lives on, readable and writable through the descriptors that hold
  it, until the last close (unlink(2)), as on ext4 or tmpfs;
- its own device number, file ids and ``statvfs`` (the size it was given,
  laid out as ``_fsstat`` lays out the export's ext4).

A host crash stops the host for good (nothing restarts on it) and no other
host can read its local disks, so what a crash would leave on them is never
observed; they are kept as they were.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._client import NfsClient
from ._dirops import Pin
from ._fsstat import BLOCK, FsStat, fsstat
from ._mount import MountOptions
from ._server import Attrs, Server

if TYPE_CHECKING:
    from .._engine._clock import VirtualClock
    from ._store import BlockStore

# Each local disk's file ids start at its own multiple of this, far above any
# export's: locks, which the world keys by file id, never mix two files.
FILEID_SPAN = 1 << 40
_OPTIONS = MountOptions.parse("vers=3,noac,lookupcache=none")  # frozen: one for all


class LocalDisk(Server):
    """One local filesystem's tree: a ``Server`` whose every open is held on it."""

    def __init__(self, clock: VirtualClock, number: int, total_bytes: int,
                 store: BlockStore | None = None) -> None:
        super().__init__(clock, first_fileid=number * FILEID_SPAN, store=store)
        self.total_bytes = total_bytes

    def fsstat(self) -> FsStat:
        used = sum(inode.used() for inode in self.inodes.values()) // BLOCK
        return fsstat(used, len(self.inodes), self.total_bytes)


class LocalClient(NfsClient):
    """A local filesystem's view for its one host: no RPCs, caches or silly renames."""

    def __init__(self, disk: LocalDisk, clock: VirtualClock) -> None:
        super().__init__(disk, clock, _OPTIONS)
        self.disk = disk

    def _rpc(self, name: str, nbytes: int = 0) -> None:
        """A local filesystem sends no RPC."""

    def _held(self, fileid: int, dir_id: int, name: str) -> bool:
        return False  # no silly rename: the name goes, the inode stays while open

    def open_file(self, attrs: Attrs, *, created: bool, writable: bool = False,
                  label: str = "", dentry: tuple[int, str] | None = None,
                  readable: bool = True) -> Pin | None:
        pin = super().open_file(attrs, created=created, writable=writable, label=label,
                                dentry=dentry, readable=readable)
        self.disk.opened(attrs.fileid)
        return pin

    def release(self, fileid: int, *, writable: bool = False, pin: Pin | None = None) -> None:
        super().release(fileid, writable=writable, pin=pin)
        self.disk.closed(fileid)
