"""One host's Linux NFSv3 client: attribute, dentry, access and page caches.

This is where NFS semantics live (DESIGN §3.4).  Each method is what the
Linux client does for one VFS step, and sends the RPCs it would send.  The
rules, with the kernel functions they follow (fs/nfs/dir.c, inode.c):

- Attribute cache (``nfs_update_inode``): attributes are valid for
  ``timeo`` after they were read.  A revalidation that finds them unchanged
  doubles ``timeo`` (up to the max) once the previous timeout has run out; one
  that finds a change resets it to the min.
- Dentry cache (``nfs_check_verifier``): an entry is trusted while the
  parent's attributes are valid and the parent's verifier is the one seen
  when the entry was made.  A parent whose attributes expired is revalidated
  (GETATTR); a change bumps the verifier, so all its entries are distrusted.
- ``lookupcache=positive`` never trusts a negative entry, ``none`` trusts no
  entry (``nfs_neg_need_reval``).  A create intent trusts a negative entry and
  lets the CREATE settle it; an exclusive create or a rename target skips
  the LOOKUP of an uncached name altogether.
- Close-to-open (``nfs_lookup_verify_inode``): opening a file or directory
  sends a GETATTR whatever the cache says, unless ``nocto``.
- Weak cache consistency: a directory changed only by this host's own
  operation keeps its entries; anyone else's change invalidates them.
- Silly rename (``nfs_sillyrename``): unlinking or replacing a file open on
  this host renames it to ``.nfs`` + 16 hex digits of file id + 8 of a
  per-client counter (measured: ``.nfs000000000000008900000001``, DESIGN
  §3.5); unlinking such a busy entry is EBUSY; the last close removes it.
"""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Callable
from typing import Final, TypeVar

from .._engine._clock import VirtualClock
from .._errors import simulated_oserror
from ._mount import MountOptions
from ._server import Attrs, Server

T = TypeVar("T")

# Lookup intents, after the kernel's LOOKUP_* flags.
OPEN: Final = 1
CREATE: Final = 2
EXCL: Final = 4
RENAME_TARGET: Final = 8


class CachedAttrs:
    """One inode's cached attributes and the adaptive timeout that guards them."""

    __slots__ = ("attrs", "listing", "listing_change", "read_ns", "stamp_ns", "timeo_ns",
                 "verifier")

    def __init__(self, attrs: Attrs, now_ns: int, timeo_ns: int) -> None:
        self.attrs = attrs
        self.read_ns = now_ns
        self.timeo_ns = timeo_ns
        self.stamp_ns = now_ns
        # Directories only: bumped whenever a foreign change is seen, which
        # distrusts every dentry made under the old value.
        self.verifier = 0
        self.listing: list[tuple[str, Attrs]] | None = None
        self.listing_change = -1


class Pages:
    """A file's page cache on this host: the whole file image, maybe dirty."""

    __slots__ = ("change", "data", "dirty")

    def __init__(self, data: bytearray, change: int) -> None:
        self.data = data
        self.change = change
        self.dirty = False


def _enoent() -> OSError:
    return simulated_oserror(errno.ENOENT)


class NfsClient:
    """The client state of one host's mount of the export."""

    def __init__(self, server: Server, clock: VirtualClock, options: MountOptions) -> None:
        self.server = server
        self.clock = clock
        self.options = options
        self.rpcs: Counter[str] = Counter()
        self.call_rpcs: list[str] = []
        self.attrs: dict[int, CachedAttrs] = {}
        # dir fileid -> name -> (fileid or None for a negative entry, verifier)
        self.dentries: dict[int, dict[str, tuple[int | None, int]]] = {}
        self.access: dict[int, int] = {}
        self.pages: dict[int, Pages] = {}
        self.open_count: dict[int, int] = {}
        self.silly: dict[int, tuple[int, str]] = {}
        self.silly_counter = 0
        self.root = server.root.fileid
        # The mount itself fetched the root's attributes.
        self._update(self.root, server.getattr(self.root))

    # -- RPCs and the attribute cache ----------------------------------------

    def _rpc(self, name: str) -> None:
        self.rpcs[name] += 1
        self.call_rpcs.append(name)

    def _update(self, fileid: int, attrs: Attrs, *, own_change: bool = False) -> None:
        """Take fresh attributes (``nfs_update_inode``)."""
        now = self.clock.now_ns
        cached = self.attrs.get(fileid)
        low, high = self.options.attr_timeouts_ns(attrs.is_dir)
        if cached is None:
            self.attrs[fileid] = CachedAttrs(attrs, now, low)
            return
        if attrs.change != cached.attrs.change and not own_change:
            cached.timeo_ns = low
            cached.stamp_ns = now
            # A foreign change invalidates the access cache too: the next
            # traversal or open sends ACCESS again (measured in the VM, Linux
            # 6.1: twice the ACCESS calls of a cache keyed on the mode alone).
            self.access.pop(fileid, None)
            if attrs.is_dir:
                cached.verifier += 1
                cached.listing = None
            else:
                pages = self.pages.get(fileid)
                if pages is not None and not pages.dirty:
                    del self.pages[fileid]
        else:
            if not cached.stamp_ns <= now < cached.stamp_ns + cached.timeo_ns:
                cached.timeo_ns = min(max(cached.timeo_ns * 2, low), high)
            cached.stamp_ns = now
        cached.attrs = attrs
        cached.read_ns = now

    def _forget(self, fileid: int) -> None:
        self.attrs.pop(fileid, None)
        self.dentries.pop(fileid, None)
        self.pages.pop(fileid, None)

    def getattr(self, fileid: int, *, force: bool = False) -> Attrs:
        """Cached attributes while valid, else a GETATTR (``nfs_revalidate_inode``)."""
        cached = self.attrs.get(fileid)
        if (cached is not None and not force
                and self.clock.now_ns - cached.read_ns < cached.timeo_ns):
            return cached.attrs
        self._rpc("GETATTR")
        try:
            attrs = self.server.getattr(fileid)
        except OSError:
            self._forget(fileid)
            raise
        self._update(fileid, attrs)
        return attrs

    def _check_access(self, attrs: Attrs) -> None:
        """ACCESS once per inode, again after a mode change or a foreign change
        (``nfs_do_access``; the access cache is dropped with the attributes)."""
        if self.access.get(attrs.fileid) != attrs.mode:
            self._rpc("ACCESS")
            self.access[attrs.fileid] = attrs.mode

    # -- dentries ---------------------------------------------------------------

    def _verifier_ok(self, dir_id: int, verifier: int) -> bool:
        """``nfs_check_verifier``: revalidates an expired parent before trusting."""
        if self.options.lookupcache == "none":
            return False
        cached = self.attrs.get(dir_id)
        if cached is None or cached.verifier != verifier:
            return False
        self.getattr(dir_id)  # a GETATTR if the parent's attributes expired
        return cached.verifier == verifier

    def _set_dentry(self, dir_id: int, name: str, fileid: int | None) -> None:
        cached = self.attrs.get(dir_id)
        verifier = cached.verifier if cached is not None else -1
        entries = self.dentries.get(dir_id)
        if entries is None:
            entries = self.dentries[dir_id] = {}
        entries[name] = (fileid, verifier)

    def _cached_dentry(self, dir_id: int, name: str) -> tuple[int | None, int] | None:
        entries = self.dentries.get(dir_id)
        return None if entries is None else entries.get(name)

    def lookup(self, dir_id: int, name: str, intent: int = 0) -> Attrs:
        """Resolve one name in a directory, from cache or with a LOOKUP.

        Raises:
            FileNotFoundError: the name is absent, or a trusted negative
                dentry says so without asking the server.
        """
        dentry = self._cached_dentry(dir_id, name)
        if dentry is not None:
            fileid, verifier = dentry
            if fileid is None:
                if self._negative_trusted(dir_id, verifier, intent):
                    raise _enoent()
            elif not intent & EXCL and self._verifier_ok(dir_id, verifier):
                try:
                    force = bool(intent & OPEN) and self.options.cto
                    return self.getattr(fileid, force=force)
                except OSError as error:
                    if error.errno != errno.ESTALE:
                        raise
                    # The file went away on the server: look the name up afresh.
        return self._lookup_rpc(dir_id, name)

    def _negative_trusted(self, dir_id: int, verifier: int, intent: int) -> bool:
        if intent & CREATE:
            return True
        if self.options.lookupcache != "all":
            return False
        return self._verifier_ok(dir_id, verifier)

    def _lookup_rpc(self, dir_id: int, name: str) -> Attrs:
        self._rpc("LOOKUP")
        try:
            found = self.server.lookup(dir_id, name)
        except OSError:
            self._forget(dir_id)
            raise
        # The reply carries the directory's post-op attributes.
        self._update(dir_id, self.server.getattr(dir_id))
        if found is None:
            self._set_dentry(dir_id, name, None)
            raise _enoent()
        self._update(found.fileid, found)
        self._set_dentry(dir_id, name, found.fileid)
        return found

    def lookup_if_cached(self, dir_id: int, name: str, intent: int) -> Attrs | None:
        """For an exclusive create or a rename target: no LOOKUP of an uncached name.

        ``nfs_lookup`` optimises the LOOKUP away for these; the CREATE, MKDIR,
        LINK or RENAME that follows tells the truth.
        """
        dentry = self._cached_dentry(dir_id, name)
        if dentry is None:
            return None
        try:
            return self.lookup(dir_id, name, intent)
        except FileNotFoundError:
            return None

    def walk(self, start: int, components: list[str]) -> Attrs:
        """Resolve directories one by one; every one must be searchable."""
        attrs = self.getattr(start)
        for name in components:
            if not attrs.is_dir:
                raise simulated_oserror(errno.ENOTDIR)
            self._check_access(attrs)
            attrs = self.lookup(attrs.fileid, name)
        return attrs

    # -- operations on directories ----------------------------------------------

    def _dir_op(self, dir_ids: tuple[int, ...], operation: Callable[[], T]) -> T:
        """Run one modifying RPC and take its weak-cache-consistency reply."""
        server = self.server
        before = {d: server.getattr(d).change for d in dir_ids}
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

    def _drop_dentry(self, dir_id: int, name: str) -> None:
        """``d_drop``: a failed create forgets the name, so the next lookup asks."""
        entries = self.dentries.get(dir_id)
        if entries is not None:
            entries.pop(name, None)

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
        if self.open_count.get(fileid):
            if self.silly.get(fileid) == (dir_id, name):
                # Already silly-renamed and still open: nfs_sillyrename refuses.
                raise simulated_oserror(errno.EBUSY)
            self._silly_rename(dir_id, name, fileid)
            return
        self._rpc("REMOVE")
        try:
            self._dir_op((dir_id,), lambda: self.server.remove(dir_id, name))
        except FileNotFoundError:
            self._set_dentry(dir_id, name, None)
            raise
        self._set_dentry(dir_id, name, None)

    def _silly_rename(self, dir_id: int, name: str, fileid: int) -> str:
        while True:
            self.silly_counter += 1
            silly = f".nfs{fileid:016x}{self.silly_counter:08x}"
            try:
                self.lookup(dir_id, silly)
            except FileNotFoundError:
                break
        self._rpc("RENAME")
        self._dir_op((dir_id,), lambda: self.server.rename(dir_id, name, dir_id, silly))
        self._set_dentry(dir_id, name, None)
        self._set_dentry(dir_id, silly, fileid)
        self.silly[fileid] = (dir_id, silly)
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
        target = self.lookup_if_cached(to_dir, to_name, RENAME_TARGET)
        if (target is not None and target.fileid != source.fileid and not target.is_dir
                and self.open_count.get(target.fileid)):
            # nfs_rename: a busy target is silly-renamed first, so the open
            # file survives as .nfsXXXX beside the new one (seed 002, #531).
            self._silly_rename(to_dir, to_name, target.fileid)
        self._rpc("RENAME")
        dirs = (from_dir,) if from_dir == to_dir else (from_dir, to_dir)
        self._dir_op(dirs, lambda: self.server.rename(from_dir, from_name, to_dir, to_name))
        self._set_dentry(from_dir, from_name, None)
        self._set_dentry(to_dir, to_name, source.fileid)

    def link(self, fileid: int, dir_id: int, name: str) -> Attrs:
        if self.lookup_if_cached(dir_id, name, CREATE | EXCL) is not None:
            raise simulated_oserror(errno.EEXIST)
        self._rpc("LINK")
        attrs = self._dir_op((dir_id,), lambda: self.server.link(fileid, dir_id, name))
        self._update(fileid, attrs, own_change=True)
        self._set_dentry(dir_id, name, fileid)
        return attrs

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

    # -- file data --------------------------------------------------------------

    def open_file(self, attrs: Attrs, *, created: bool) -> None:
        """Count an open on this host; a file this open created needs no ACCESS."""
        if not created:
            self._check_access(attrs)
        self.open_count[attrs.fileid] = self.open_count.get(attrs.fileid, 0) + 1

    def read_pages(self, fileid: int) -> Pages:
        """The page cache, refilled with a READ after a change or when empty."""
        self.getattr(fileid)
        pages = self.pages.get(fileid)
        if pages is None:
            self._rpc("READ")
            data = self.server.read(fileid)
            pages = self.pages[fileid] = Pages(bytearray(data), self.attrs[fileid].attrs.change)
        return pages

    def write_pages(self, fileid: int) -> Pages:
        """Pages to write into; the current image is loaded without a READ.

        Real clients write whole pages without reading them first; this model
        keeps one image per file, so it loads the image silently.
        """
        pages = self.pages.get(fileid)
        if pages is None:
            data = self.server.read(fileid)
            change = self.server.getattr(fileid).change
            pages = self.pages[fileid] = Pages(bytearray(data), change)
        pages.dirty = True
        return pages

    def size(self, fileid: int) -> int:
        """The size this host sees: its page cache (its own writes), else the attributes."""
        pages = self.pages.get(fileid)
        return len(pages.data) if pages is not None else self.getattr(fileid).size

    def lose_memory(self) -> None:
        """A crash: the page cache, unflushed writes included, is gone."""
        self.pages.clear()

    def stat_attrs(self, attrs: Attrs) -> Attrs:
        """The attributes a stat reports: ``nfs_getattr`` flushes this host's
        cached pages first, so that size and mtime are right."""
        if attrs.is_dir or attrs.fileid not in self.pages:
            return attrs
        self.flush(attrs.fileid)
        return self.getattr(attrs.fileid)

    def flush(self, fileid: int) -> None:
        """WRITE and COMMIT dirty pages (close, fsync, or a stat of this file)."""
        pages = self.pages.get(fileid)
        if pages is None or not pages.dirty:
            return
        self._rpc("WRITE")
        self._rpc("COMMIT")
        attrs = self.server.write(fileid, pages.data)
        pages.dirty = False
        pages.change = attrs.change
        self._update(fileid, attrs, own_change=True)

    def setattr(self, fileid: int, **changes: int | None) -> Attrs:
        self._rpc("SETATTR")
        pages = self.pages.get(fileid)
        if pages is not None and changes.get("size") is not None:
            size = changes["size"]
            assert size is not None
            del pages.data[size:]
            pages.data.extend(b"\0" * (size - len(pages.data)))
        attrs = self.server.setattr(fileid, **changes)
        self._update(fileid, attrs, own_change=True)
        if pages is not None:
            pages.change = attrs.change
        return attrs

    def release(self, fileid: int) -> None:
        """The last close on this host removes a silly-renamed file."""
        count = self.open_count.get(fileid, 0) - 1
        if count > 0:
            self.open_count[fileid] = count
            return
        self.open_count.pop(fileid, None)
        silly = self.silly.pop(fileid, None)
        if silly is None:
            return
        dir_id, name = silly
        self._rpc("REMOVE")
        try:
            self._dir_op((dir_id,), lambda: self.server.remove(dir_id, name))
        except OSError:
            pass  # another host removed it first, or the directory went away
        self._set_dentry(dir_id, name, None)
