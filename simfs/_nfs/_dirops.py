"""Directory operations of ``NfsClient``: create, remove, rename, list.

Each sends its RPC and takes the reply's weak-cache-consistency attributes
(``_dir_op``): a directory changed only by this host's own operation keeps
its entries; anyone else's change invalidates them.  Silly rename
(``nfs_sillyrename``, fs/nfs/unlink.c) lives here too.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .._errors import simulated_oserror
from ._lookup import CREATE, EXCL, OPEN, RENAME_TARGET, LookupOps

if TYPE_CHECKING:
    from ._server import Attrs

T = TypeVar("T")


class Pin:
    """The name one open file holds on this host (its dentry's reference).

    It moves with the dentry: a rename or a silly rename on this host
    carries the open file's name along (``d_move``).
    """

    __slots__ = ("dir_id", "name")

    def __init__(self, dir_id: int, name: str) -> None:
        self.dir_id = dir_id
        self.name = name


class DirectoryOps(LookupOps):
    """The namespace-changing half of ``NfsClient``."""

    open_count: dict[int, int]
    writers: dict[int, int]
    pins: dict[int, list[Pin]]
    silly: dict[int, list[tuple[int, str]]]
    silly_counter: int
    link_targets: dict[int, str]

    def _forget(self, fileid: int) -> None:
        raise NotImplementedError

    def invalidate_attrs(self, fileid: int) -> None:
        raise NotImplementedError

    def recall(self, fileid: int, *, delay: bool, opening: bool = False) -> None:
        raise NotImplementedError

    def _dir_op(self, dir_ids: tuple[int, ...], operation: Callable[[], T]) -> T:
        """Run one modifying RPC and take its weak-cache-consistency reply."""
        server = self.server
        for dir_id in dir_ids:
            if dir_id in self.stale:
                raise simulated_oserror(errno.ESTALE)
        try:
            before = {d: server.getattr(d).change for d in dir_ids}
        except OSError as error:
            for dir_id in dir_ids:
                if dir_id not in server.inodes:
                    self._server_error(dir_id, error)
            raise
        try:
            return operation()
        finally:
            for dir_id in dir_ids:
                try:
                    post = server.getattr(dir_id)
                except OSError:
                    self._forget(dir_id)
                    continue
                cached = self.attrs.get(dir_id)
                own = cached is not None and cached.attrs.change == before[dir_id]
                self._update(dir_id, post, own_change=own)

    def create(self, dir_id: int, name: str, *, exclusive: bool, mode: int) -> tuple[Attrs, bool]:
        """open(O_CREAT): (attributes, whether this call created the file)."""
        if exclusive:
            if self.lookup_if_cached(dir_id, name, CREATE | EXCL | OPEN) is not None:
                raise simulated_oserror(errno.EEXIST)
        else:
            try:
                return self.lookup(dir_id, name, CREATE | OPEN), False
            except FileNotFoundError:
                pass
        self._rpc("CREATE")
        try:
            attrs, created = self._dir_op(
                (dir_id,), lambda: self.server.create(dir_id, name, exclusive=exclusive,
                                                      mode=mode))
        except FileExistsError:
            self._drop_dentry(dir_id, name)
            raise
        self._update(attrs.fileid, attrs)
        self._set_dentry(dir_id, name, attrs.fileid)
        return attrs, created

    def mkdir(self, dir_id: int, name: str, mode: int) -> Attrs:
        if self.lookup_if_cached(dir_id, name, CREATE | EXCL) is not None:
            raise simulated_oserror(errno.EEXIST)
        self._rpc("MKDIR")
        try:
            attrs = self._dir_op((dir_id,), lambda: self.server.mkdir(dir_id, name, mode))
        except FileExistsError:
            self._drop_dentry(dir_id, name)
            raise
        self._update(attrs.fileid, attrs)
        self._set_dentry(dir_id, name, attrs.fileid)
        return attrs

    def unlink(self, dir_id: int, name: str) -> None:
        attrs = self.lookup(dir_id, name)
        if attrs.is_dir:
            raise simulated_oserror(errno.EISDIR)
        fileid = attrs.fileid
        if self._held(fileid, dir_id, name):
            if (dir_id, name) in self.silly.get(fileid, ()):
                # Already silly-renamed and still open: nfs_sillyrename refuses.
                raise simulated_oserror(errno.EBUSY)
            self._silly_rename(dir_id, name, fileid)
            return
        self.recall(fileid, delay=False)  # nfsd_unlink waits for the return
        self._rpc("REMOVE")
        try:
            self._dir_op((dir_id,), lambda: self.server.remove(dir_id, name))
        except FileNotFoundError:
            self._set_dentry(dir_id, name, None)
            raise
        self._set_dentry(dir_id, name, None)
        # nfs_safe_remove drops the inode's link count and marks its change,
        # ctime and nlink invalid (nfs_drop_nlink, fs/nfs/dir.c): another
        # name of the same file stats fresh attributes on this host.
        self.invalidate_attrs(fileid)

    def _held(self, fileid: int, dir_id: int, name: str) -> bool:
        """Whether an open file on this host holds this name of ``fileid``.

        Another name of the same open file is removed at once: its dentry
        is not in use (nfs_unlink, fs/nfs/dir.c: ``d_count(dentry) > 1``).
        """
        return any(pin.dir_id == dir_id and pin.name == name
                   for pin in self.pins.get(fileid, ()))

    def _move_pins(self, fileid: int, old: tuple[int, str], new: tuple[int, str]) -> None:
        for pin in self.pins.get(fileid, ()):
            if (pin.dir_id, pin.name) == old:
                pin.dir_id, pin.name = new

    def _silly_rename(self, dir_id: int, name: str, fileid: int) -> str:
        while True:
            self.silly_counter += 1
            silly = f".nfs{fileid:016x}{self.silly_counter:08x}"
            try:
                self.lookup(dir_id, silly)
            except FileNotFoundError:
                break
        self.recall(fileid, delay=False)  # nfsd_rename waits for the source's return
        self._rpc("RENAME")
        self._dir_op((dir_id,), lambda: self.server.rename(dir_id, name, dir_id, silly))
        self._set_dentry(dir_id, name, None)
        self._set_dentry(dir_id, silly, fileid)
        self._move_pins(fileid, (dir_id, name), (dir_id, silly))
        self.silly.setdefault(fileid, []).append((dir_id, silly))
        # nfs_sillyrename marks the renamed inode's attributes invalid
        # (NFS_INO_INVALID_CHANGE | NFS_INO_REVAL_FORCED): the holder's next
        # fstat or read asks the server, and gets ESTALE once another host
        # removed the .nfs file (docs/nfs-facts.md, "Stale handles", measured).
        self.invalidate_attrs(fileid)
        return silly

    def rmdir(self, dir_id: int, name: str) -> None:
        attrs = self.lookup(dir_id, name)
        if not attrs.is_dir:
            raise simulated_oserror(errno.ENOTDIR)
        self._rpc("RMDIR")
        try:
            self._dir_op((dir_id,), lambda: self.server.rmdir(dir_id, name))
        except FileNotFoundError:
            self._set_dentry(dir_id, name, None)
            raise
        self._set_dentry(dir_id, name, None)
        self._forget(attrs.fileid)

    def rename(self, from_dir: int, from_name: str, to_dir: int, to_name: str) -> None:
        source = self.lookup(from_dir, from_name)
        # A delegated file the rename would replace: NFS4ERR_DELAY (measured:
        # two RENAMEs and a delay event; nfsd_rename waits only for the
        # source's return), before anything of the rename happens.
        if self.server.delegations.any():
            try:
                replaced = self.server.lookup(to_dir, to_name)
            except OSError:
                replaced = None
            if (replaced is not None and replaced.fileid != source.fileid
                    and not replaced.is_dir):
                self.recall(replaced.fileid, delay=True)
        target = self.lookup_if_cached(to_dir, to_name, RENAME_TARGET)
        if (target is not None and target.fileid != source.fileid and not target.is_dir
                and self._held(target.fileid, to_dir, to_name)):
            # nfs_rename: a busy target is silly-renamed first, so the open
            # file survives as .nfsXXXX beside the new one (seed 002, #531).
            self._silly_rename(to_dir, to_name, target.fileid)
        self.recall(source.fileid, delay=False)  # nfsd_rename waits for the return
        self._rpc("RENAME")
        dirs = (from_dir,) if from_dir == to_dir else (from_dir, to_dir)
        self._dir_op(dirs, lambda: self.server.rename(from_dir, from_name, to_dir, to_name))
        self._set_dentry(from_dir, from_name, None)
        self._set_dentry(to_dir, to_name, source.fileid)
        self._move_pins(source.fileid, (from_dir, from_name), (to_dir, to_name))

    def link(self, fileid: int, dir_id: int, name: str) -> Attrs:
        if self.lookup_if_cached(dir_id, name, CREATE | EXCL) is not None:
            raise simulated_oserror(errno.EEXIST)
        self.recall(fileid, delay=True)  # NFS4ERR_DELAY (measured: two LINKs, a delay)
        self._rpc("LINK")
        attrs = self._dir_op((dir_id,), lambda: self.server.link(fileid, dir_id, name))
        self._update(fileid, attrs, own_change=True)
        self._set_dentry(dir_id, name, fileid)
        return attrs

    def symlink(self, dir_id: int, name: str, target: str) -> Attrs:
        """SYMLINK: the link's target is known from here on without a READLINK."""
        if self.lookup_if_cached(dir_id, name, CREATE | EXCL) is not None:
            raise simulated_oserror(errno.EEXIST)
        self._rpc("SYMLINK")
        try:
            attrs = self._dir_op((dir_id,), lambda: self.server.symlink(dir_id, name, target))
        except FileExistsError:
            self._drop_dentry(dir_id, name)
            raise
        self._update(attrs.fileid, attrs)
        self._set_dentry(dir_id, name, attrs.fileid)
        self.link_targets[attrs.fileid] = target
        return attrs

    def readlink(self, link: Attrs) -> str:
        """A link's target: from the cache, else one READLINK.

        ``nfs_get_link`` (fs/nfs/symlink.c) keeps the target in the link's
        page cache and revalidates it by attributes only
        (``nfs_revalidate_mapping``); a link's target never changes on NFS
        (there is no call that rewrites one), so a cached target stays right
        for as long as the link lives.  The caller has just looked the link
        up, which revalidated its attributes by the usual rules.
        """
        target = self.link_targets.get(link.fileid)
        if target is not None:
            return target
        self._rpc("READLINK")
        try:
            target = self.server.readlink(link.fileid)
        except OSError as error:
            self._server_error(link.fileid, error)
            raise
        self.link_targets[link.fileid] = target
        return target

    def readdir(self, dir_id: int, *, revalidate: bool = True) -> list[tuple[str, Attrs]]:
        """Read a directory (READDIRPLUS) unless its cached listing is current.

        ``revalidate`` is the close-to-open GETATTR of opening it; callers that
        already opened it with an open intent pass False.
        """
        attrs = self.getattr(dir_id, force=revalidate and self.options.cto)
        if not attrs.is_dir:
            raise simulated_oserror(errno.ENOTDIR)
        self._check_access(attrs)
        cached = self.attrs[dir_id]
        if cached.listing is not None and cached.listing_change == attrs.change:
            return cached.listing
        self._rpc("READDIRPLUS")
        listing = self.server.readdir(dir_id)
        for name, child in listing:
            self._update(child.fileid, child)
            self._set_dentry(dir_id, name, child.fileid)
        cached.listing = listing
        cached.listing_change = attrs.change
        return listing

    def release(self, fileid: int, *, writable: bool = False, pin: Pin | None = None) -> None:
        """A close: the last one holding a silly-renamed name removes it."""
        if writable:
            writers = self.writers.get(fileid, 0) - 1
            if writers > 0:
                self.writers[fileid] = writers
            else:
                self.writers.pop(fileid, None)
        count = self.open_count.get(fileid, 0) - 1
        if count > 0:
            self.open_count[fileid] = count
        else:
            self.open_count.pop(fileid, None)
        if self.kernel.server_holds_opens and fileid in self.server.open_refs:
            self.server.closed(fileid)  # NFSv4.x CLOSE: the OPEN state goes
            if self.kernel.read_delegations:
                self.server.delegations.closed(
                    fileid, self, self.clock.now_ns, writable=writable,
                    last_on_server=fileid not in self.server.open_refs)
        if pin is None:
            return
        pins = self.pins[fileid]
        pins.remove(pin)
        if not pins:
            del self.pins[fileid]
        held = (pin.dir_id, pin.name)
        names = self.silly.get(fileid)
        if names is None or held not in names or self._held(fileid, *held):
            return
        # The .nfs name's last user is gone: nfs_dentry_iput ->
        # nfs_complete_unlink removes it, whatever else holds the inode.
        names.remove(held)
        if not names:
            del self.silly[fileid]
        dir_id, name = held
        self._rpc("REMOVE")
        try:
            self._dir_op((dir_id,), lambda: self.server.remove(dir_id, name))
        except OSError:
            pass  # another host removed it first, or the directory went away
        self._set_dentry(dir_id, name, None)
