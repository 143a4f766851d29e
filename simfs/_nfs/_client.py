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
from typing import Final, NamedTuple, TypeVar

from .._engine._clock import VirtualClock
from .._errors import simulated_oserror
from ._kernels import DEFAULT_KERNEL, KernelProfile, kernel_profile
from ._mount import MountOptions
from ._pagecache import PAGE_SIZE, FileCache, PageCacheOps, Writeback
from ._server import Attrs, Server

T = TypeVar("T")

# A path component no name can equal: "search the start directory, then go
# to the export root" (a relative path that climbs out of the cwd with "..").
UP_FROM_START: Final = "/"

# What a cached dentry lets a lookup do (``NfsClient.verdict``).
ASK: Final = "ask"                # send a LOOKUP
REVALIDATE: Final = "revalidate"  # GETATTR the directory first, then decide
NEGATIVE: Final = "negative"      # ENOENT from cache
POSITIVE: Final = "positive"      # the cached file id


class Verdict(NamedTuple):
    """A lookup's decision from cache: what it does, on what, why, until when."""

    kind: str
    fileid: int | None
    reason: str
    until_ns: int | None = None


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


def _enoent() -> OSError:
    return simulated_oserror(errno.ENOENT)


# A CachedAttrs.read_ns that no timeout reaches: the attributes are marked
# invalid (NFS_INO_INVALID_CHANGE) and the next use sends a GETATTR.
_INVALID_NS: Final = -(1 << 62)


class NfsClient(PageCacheOps):
    """The client state of one host's mount of the export."""

    def __init__(self, server: Server, clock: VirtualClock, options: MountOptions,
                 kernel: KernelProfile | None = None) -> None:
        self.server = server
        self.clock = clock
        self.options = options
        self.kernel = kernel or kernel_profile(DEFAULT_KERNEL)
        self.rpcs: Counter[str] = Counter()
        self.call_rpcs: list[str] = []
        self.attrs: dict[int, CachedAttrs] = {}
        # dir fileid -> name -> (fileid or None for a negative entry, verifier)
        self.dentries: dict[int, dict[str, tuple[int | None, int]]] = {}
        self.access: dict[int, int] = {}
        self.files: dict[int, FileCache] = {}
        self.writers: dict[int, int] = {}
        self.writeback: Writeback | None = None
        # Inodes the server answered ESTALE for (NFS_INO_STALE): every later
        # use fails at once, without an RPC (``nfs_set_inode_stale``).
        self.stale: set[int] = set()
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
            elif not self.writers.get(fileid):
                # nfs_update_inode: NFS_INO_INVALID_DATA, unless this host
                # has writers (the change could be its own writeback).
                cache = self.files.get(fileid)
                if cache is not None:
                    cache.invalid = True
        else:
            if not cached.stamp_ns <= now < cached.stamp_ns + cached.timeo_ns:
                cached.timeo_ns = min(max(cached.timeo_ns * 2, low), high)
            cached.stamp_ns = now
        cached.attrs = attrs
        cached.read_ns = now
        cache = self.files.get(fileid)
        if cache is not None and attrs.size != cache.size and (not cache.dirty
                                                               or attrs.size > cache.size):
            # nfs_update_inode: the size follows the server's unless writes
            # are pending and the server's is smaller.
            cache.size = attrs.size

    def _forget(self, fileid: int) -> None:
        self.attrs.pop(fileid, None)
        self.dentries.pop(fileid, None)
        self.files.pop(fileid, None)

    def _server_error(self, fileid: int, error: OSError) -> None:
        """An RPC on ``fileid`` failed: forget it, and remember a stale handle."""
        self._forget(fileid)
        if error.errno == errno.ESTALE:
            self.stale.add(fileid)
            self.access.pop(fileid, None)

    def getattr(self, fileid: int, *, force: bool = False) -> Attrs:
        """Cached attributes while valid, else a GETATTR (``nfs_revalidate_inode``).

        Raises:
            OSError: ESTALE, at once and without an RPC, for an inode the
                server already called stale (``__nfs_revalidate_inode``
                checks ``NFS_STALE`` first).
        """
        cached = self.attrs.get(fileid)
        if (cached is not None and not force
                and self.clock.now_ns - cached.read_ns < cached.timeo_ns):
            return cached.attrs
        if fileid in self.stale:
            raise simulated_oserror(errno.ESTALE)
        self._rpc("GETATTR")
        try:
            attrs = self.server.getattr(fileid)
        except OSError as error:
            self._server_error(fileid, error)
            raise
        self._update(fileid, attrs)
        return attrs

    def invalidate_attrs(self, fileid: int) -> None:
        """Mark cached attributes invalid: the next use sends a GETATTR."""
        cached = self.attrs.get(fileid)
        if cached is not None:
            cached.read_ns = _INVALID_NS

    def _cached_size(self, fileid: int) -> int:
        cached = self.attrs.get(fileid)
        return cached.attrs.size if cached is not None else self.getattr(fileid).size

    def _own_write(self, fileid: int) -> None:
        """Take the post-op attributes of this host's own WRITE."""
        self._update(fileid, self.server.getattr(fileid), own_change=True)

    def _background_flush(self, fileid: int, rpcs: list[str]) -> None:
        """A writeback the client starts on its own: its RPCs go to ``rpcs``."""
        saved, self.call_rpcs = self.call_rpcs, rpcs
        try:
            self.flush(fileid)
        except OSError:
            pass  # the file is gone on the server; the data has nowhere to go
        finally:
            self.call_rpcs = saved

    def _check_access(self, attrs: Attrs) -> None:
        """ACCESS once per inode, again after a mode change or a foreign change
        (``nfs_do_access``; the access cache is dropped with the attributes).

        Raises:
            OSError: ESTALE for a stale inode, or from the ACCESS call.
        """
        fileid = attrs.fileid
        if self.access.get(fileid) != attrs.mode:
            if fileid in self.stale:
                raise simulated_oserror(errno.ESTALE)
            self._rpc("ACCESS")
            try:
                self.server.getattr(fileid)
            except OSError as error:
                self._server_error(fileid, error)
                raise
            self.access[fileid] = attrs.mode

    # -- dentries ---------------------------------------------------------------

    def _set_dentry(self, dir_id: int, name: str, fileid: int | None,
                    verifier: int | None = None) -> None:
        """``nfs_set_verifier``: ``verifier`` defaults to the directory's current one."""
        if verifier is None:
            cached = self.attrs.get(dir_id)
            verifier = cached.verifier if cached is not None else -1
        entries = self.dentries.get(dir_id)
        if entries is None:
            entries = self.dentries[dir_id] = {}
        entries[name] = (fileid, verifier)

    def _cached_dentry(self, dir_id: int, name: str) -> tuple[int | None, int] | None:
        entries = self.dentries.get(dir_id)
        return None if entries is None else entries.get(name)

    def verdict(self, dir_id: int, name: str, intent: int = 0, *,
                parent_fresh: bool = False) -> Verdict:
        """What ``lookup`` would do for ``name`` now, from the caches alone, and why.

        This is the single place the trust rules live (``nfs_lookup_revalidate``
        -> ``nfs_neg_need_reval`` / ``nfs_check_verifier``): ``lookup`` acts on
        it, and ``Host.belief`` reports it, so the two cannot disagree.
        """
        options = self.options
        dentry = self._cached_dentry(dir_id, name)
        if dentry is None:
            return Verdict(ASK, None, "nothing is cached for the name; the next lookup "
                           "asks the server (LOOKUP)")
        fileid, verifier = dentry
        if fileid is None:
            if intent & CREATE:
                # nfs_neg_need_reval: a create trusts a negative entry and
                # lets the CREATE settle it.
                return Verdict(NEGATIVE, None, "a create trusts a negative entry")
            if options.lookupcache != "all":
                return Verdict(ASK, None, f"lookupcache={options.lookupcache} never trusts a "
                               "negative entry; the next lookup asks the server (LOOKUP)")
        elif intent & EXCL:
            return Verdict(ASK, fileid, "an exclusive create looks the name up afresh")
        if options.lookupcache == "none":
            return Verdict(ASK, fileid, "lookupcache=none trusts no entry; the next lookup "
                           "asks the server (LOOKUP)")
        cached = self.attrs.get(dir_id)
        if cached is None or cached.verifier != verifier:
            return Verdict(ASK, fileid, "the entry predates a change seen in its directory "
                           "(or the reply that made it showed one); the next lookup asks "
                           "the server (LOOKUP)")
        until = cached.read_ns + cached.timeo_ns
        if not parent_fresh and self.clock.now_ns >= until:
            return Verdict(REVALIDATE, fileid, "the directory's cached attributes expired; the "
                           "next lookup revalidates it (GETATTR) and keeps the entry only if "
                           "it is unchanged")
        option = self._timeout_option(cached.timeo_ns, True)
        kind = NEGATIVE if fileid is None else POSITIVE
        what = "negative" if fileid is None else "positive"
        return Verdict(kind, fileid, f"{what} dentry, trusted while the directory's cached "
                       f"attributes are valid ({option})", until)

    def _timeout_option(self, timeo_ns: int, is_dir: bool) -> str:
        """Which mount option sets a cache lifetime, for explanations."""
        options = self.options
        if options.noac:
            return "noac"
        low, high = ((options.acdirmin, options.acdirmax) if is_dir
                     else (options.acregmin, options.acregmax))
        prefix = "acdir" if is_dir else "acreg"
        seconds = timeo_ns / 1_000_000_000
        if seconds <= low:
            return f"{prefix}min={low}"
        if seconds >= high:
            return f"{prefix}max={high}"
        return f"{seconds:g} s, doubled from {prefix}min={low} while unchanged"

    def lookup(self, dir_id: int, name: str, intent: int = 0) -> Attrs:
        """Resolve one name in a directory, from cache or with a LOOKUP.

        Raises:
            FileNotFoundError: the name is absent, or a trusted negative
                dentry says so without asking the server.
        """
        verdict = self.verdict(dir_id, name, intent)
        if verdict.kind == REVALIDATE:
            self.getattr(dir_id)  # the GETATTR; a change bumps the verifier
            verdict = self.verdict(dir_id, name, intent, parent_fresh=True)
        if verdict.kind == NEGATIVE:
            raise _enoent()
        if verdict.kind == POSITIVE and verdict.fileid is not None:
            try:
                force = bool(intent & OPEN) and self.options.cto
                return self.getattr(verdict.fileid, force=force)
            except OSError as error:
                if error.errno != errno.ESTALE:
                    raise
                # The file went away on the server: look the name up afresh.
        return self._lookup_rpc(dir_id, name)

    def _lookup_rpc(self, dir_id: int, name: str) -> Attrs:
        """LOOKUP, and a dentry stamped with the directory's verifier from *before* it.

        ``nfs_lookup`` saves ``nfs_save_change_attribute(dir)`` before the
        call; the reply's post-op directory attributes may then show a change
        (another host's), which bumps the directory's verifier
        (``nfs_update_inode`` -> ``nfs_force_lookup_revalidate``), so the new
        dentry never verifies: the next walk through it LOOKUPs again, and
        that reply refreshes the child's attributes.  This is why a negative
        entry made in a directory another host just created is not trusted
        (DESIGN §3.5, measured): the walk re-LOOKUPs the directory, sees it
        changed, and distrusts its negative entries.
        """
        if dir_id in self.stale:
            raise simulated_oserror(errno.ESTALE)
        cached = self.attrs.get(dir_id)
        verifier = cached.verifier if cached is not None else -1
        self._rpc("LOOKUP")
        try:
            found = self.server.lookup(dir_id, name)
        except OSError as error:
            self._server_error(dir_id, error)
            raise
        # The reply carries the directory's post-op attributes.
        self._update(dir_id, self.server.getattr(dir_id))
        if cached is None:
            cached = self.attrs.get(dir_id)
            verifier = cached.verifier if cached is not None else -1
        if found is None:
            self._set_dentry(dir_id, name, None, verifier)
            raise _enoent()
        self.stale.discard(found.fileid)
        self._update(found.fileid, found)
        self._set_dentry(dir_id, name, found.fileid, verifier)
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
        """Resolve directories one by one; every one must be searchable.

        A leading ``UP_FROM_START`` searches ``start`` (a working directory)
        first, then resolves the rest from the export root: ``..`` from a
        directory another host removed is ESTALE (DESIGN §3.5, measured).
        """
        attrs = self.getattr(start)
        if components and components[0] == UP_FROM_START:
            self._check_access(attrs)
            attrs = self.getattr(self.root)
            components = components[1:]
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
        # nfs_sillyrename marks the renamed inode's attributes invalid
        # (NFS_INO_INVALID_CHANGE | NFS_INO_REVAL_FORCED): the holder's next
        # fstat or read asks the server, and gets ESTALE once another host
        # removed the .nfs file (DESIGN §3.5 "Stale handles", measured).
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

    # -- file data (the page cache itself is _pagecache.PageCacheOps) -----------

    def open_file(self, attrs: Attrs, *, created: bool, writable: bool = False,
                  label: str = "") -> None:
        """Count an open on this host; a file this open created needs no ACCESS."""
        if not created:
            self._check_access(attrs)
        fileid = attrs.fileid
        self.open_count[fileid] = self.open_count.get(fileid, 0) + 1
        if writable:
            self.writers[fileid] = self.writers.get(fileid, 0) + 1
        if not attrs.is_dir:
            self.file_cache(fileid, label)

    def lose_memory(self) -> None:
        """A crash: the page cache, unflushed writes included, is gone."""
        self.files.clear()

    def stat_attrs(self, attrs: Attrs) -> Attrs:
        """The attributes a stat reports: ``nfs_getattr`` writes this host's
        dirty pages back first, so that size and mtime are right."""
        cache = None if attrs.is_dir else self.files.get(attrs.fileid)
        if cache is None or not cache.dirty:
            return attrs
        self.flush(attrs.fileid)
        return self.getattr(attrs.fileid)

    def setattr(self, fileid: int, **changes: int | None) -> Attrs:
        """SETATTR; a size change writes dirty pages back first (``nfs_setattr``)
        and cuts the cache to the new size (``nfs_vmtruncate``)."""
        if fileid in self.stale:
            raise simulated_oserror(errno.ESTALE)
        size = changes.get("size")
        if size is not None:
            self.flush(fileid)
        self._rpc("SETATTR")
        try:
            attrs = self.server.setattr(fileid, **changes)
        except OSError as error:
            self._server_error(fileid, error)
            raise
        self._update(fileid, attrs, own_change=True)
        cache = self.files.get(fileid)
        if cache is not None and size is not None:
            cache.size = size
            keep = -(-size // PAGE_SIZE)
            for index in [i for i in cache.pages if i >= keep]:
                del cache.pages[index]
            tail = size % PAGE_SIZE
            if tail and keep - 1 in cache.pages:
                cache.pages[keep - 1].data[tail:] = bytes(PAGE_SIZE - tail)
        return attrs

    def release(self, fileid: int, *, writable: bool = False) -> None:
        """The last close on this host removes a silly-renamed file."""
        if writable:
            writers = self.writers.get(fileid, 0) - 1
            if writers > 0:
                self.writers[fileid] = writers
            else:
                self.writers.pop(fileid, None)
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
