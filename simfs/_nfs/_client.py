"""One host's Linux NFSv3 client: attribute, dentry, access and page caches.

This is where NFS semantics live (docs/design.md, "The NFS model").  Each
method is what the Linux client does for one VFS step, and sends the RPCs it
would send.  The rules, with the kernel functions they follow (fs/nfs/dir.c,
inode.c):

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
  per-client counter (measured: ``.nfs000000000000008900000001``,
  docs/nfs-facts.md, "Silly rename"); unlinking such a busy entry is EBUSY; the
  last close removes it.

The dentry rules are in ``_lookup.py``, the directory operations in
``_dirops.py``, the page cache in ``_pagecache.py``; this module holds the
attribute cache, stale handles, and the state they share.
"""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from .._engine._clock import NS_PER_S, VirtualClock
from .._errors import simulated_oserror
from ._delegations import JUKEBOX_RETRY_NS, RETRY_MIN_NS, RecallDelay, UnmodelledRecall
from ._dirops import DirectoryOps, Pin
from ._fsstat import FsStat
from ._kernels import DEFAULT_KERNEL, KernelProfile, kernel_profile
from ._link import transfer_ns
from ._lookup import CREATE as CREATE
from ._lookup import EXCL as EXCL
from ._lookup import LAST_DOT as LAST_DOT
from ._lookup import LAST_MARKERS as LAST_MARKERS
from ._lookup import LAST_SLASH as LAST_SLASH
from ._lookup import NEGATIVE as NEGATIVE
from ._lookup import OPEN as OPEN
from ._lookup import RENAME_TARGET as RENAME_TARGET
from ._lookup import UP_FROM_START as UP_FROM_START
from ._mount import MountOptions
from ._pagecache import PAGE_SIZE, FileCache, PageCacheOps, Writeback
from ._server import Attrs, Server


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

    # The one attribute-validity rule, used by getattr, the lookup's verdict,
    # the cached walk and Host.belief: the attributes serve a stat while
    # ``read_ns <= now < read_ns + timeo_ns`` (``nfs_attribute_timeout``,
    # fs/nfs/inode.c); time only moves forward, so the lower bound holds.

    def valid_at(self, now_ns: int) -> bool:
        """Whether these attributes still serve a stat at ``now_ns`` without a GETATTR."""
        return now_ns - self.read_ns < self.timeo_ns

    @property
    def expires_ns(self) -> int:
        """The first virtual time at which ``valid_at`` is false."""
        return self.read_ns + self.timeo_ns

    def lifetime_option(self, options: MountOptions) -> str:
        """Which mount option set ``timeo_ns``, for explanations."""
        if options.noac:
            return "noac"
        is_dir = self.attrs.is_dir
        low, high = ((options.acdirmin, options.acdirmax) if is_dir
                     else (options.acregmin, options.acregmax))
        prefix = "acdir" if is_dir else "acreg"
        seconds = self.timeo_ns / NS_PER_S
        if seconds <= low:
            return f"{prefix}min={low}"
        if seconds >= high:
            return f"{prefix}max={high}"
        return f"{seconds:g} s, doubled from {prefix}min={low} while unchanged"


# A CachedAttrs.read_ns that no timeout reaches: the attributes are marked
# invalid (NFS_INO_INVALID_CHANGE) and the next use sends a GETATTR.
_INVALID_NS: Final = -(1 << 62)


class RpcRecord(list[str]):
    """The RPCs one syscall (or one piece of the client's own work) sent, in
    order, and how many bytes of file data they carried (READ and WRITE).

    ``nbytes`` is a class default until a READ or WRITE sets it, so that
    making a record (once per syscall) runs list's own constructor only.
    """

    nbytes: int = 0


class NfsClient(DirectoryOps, PageCacheOps):
    """The client state of one host's mount of the export."""

    def __init__(self, server: Server, clock: VirtualClock, options: MountOptions,
                 kernel: KernelProfile | None = None) -> None:
        self.server = server
        self.clock = clock
        self.options = options
        # The host's name, for errors that name it (the world sets it).
        self.host_name = ""
        self.kernel = kernel or kernel_profile(DEFAULT_KERNEL)
        self.rpcs: Counter[str] = Counter()
        # Where _rpc records: the record the current syscall took from
        # begin_call(), or a recording() block's own.
        self._record = RpcRecord()
        # The host's link in bits per second (None: data moves in no time);
        # the world sets it (``simfs/_nfs/_link.py``).
        self.link_bps: int | None = None
        self.attrs: dict[int, CachedAttrs] = {}
        # dir fileid -> name -> (fileid or None for a negative entry, verifier)
        self.dentries: dict[int, dict[str, tuple[int | None, int]]] = {}
        self.access: dict[int, int] = {}
        self.cache_epoch = 0
        self.walk_memo: dict[tuple[int, tuple[str, ...], bool], tuple[int, int, Attrs | str]] = {}
        self.files: dict[int, FileCache] = {}
        self.writers: dict[int, int] = {}
        self.writeback: Writeback | None = None
        # Inodes the server answered ESTALE for (NFS_INO_STALE): every later
        # use fails at once, without an RPC (``nfs_set_inode_stale``).
        self.stale: set[int] = set()
        self.open_count: dict[int, int] = {}
        # The names open files hold (fileid -> one Pin per open): Linux
        # silly-renames a name whose dentry is in use, not any name of an
        # open inode (nfs_unlink: d_count(dentry) > 1).
        self.pins: dict[int, list[Pin]] = {}
        # fileid -> the .nfs names it was silly-renamed to, still held open.
        self.silly: dict[int, list[tuple[int, str]]] = {}
        self.silly_counter = 0
        # Symlink file id -> target, read once per link (fs/nfs/symlink.c).
        self.link_targets: dict[int, str] = {}
        self.root = server.root.fileid
        # The mount itself fetched the root's attributes.
        self._update(self.root, server.getattr(self.root))

    # -- RPCs and the attribute cache ----------------------------------------

    def _rpc(self, name: str, nbytes: int = 0) -> None:
        """Send one RPC; ``nbytes``: the file data it carries (READ, WRITE)."""
        self.rpcs[name] += 1
        record = self._record
        record.append(name)
        if nbytes:
            record.nbytes += nbytes

    def transfer_ns(self, nbytes: int) -> int:
        """Virtual nanoseconds ``nbytes`` of file data take over this host's link."""
        return transfer_ns(nbytes, self.link_bps)

    def begin_call(self) -> RpcRecord:
        """A fresh record of the RPCs one syscall sends, in order.

        The syscall layer takes one per call and reads it when the call ends
        (its trace event lists them, as mountstats would count them); the
        client appends to it until the next ``begin_call``.
        """
        record = self._record = RpcRecord()
        return record

    @contextmanager
    def recording(self) -> Iterator[RpcRecord]:
        """RPCs sent inside the block go to a record of their own.

        For work the client does on its own schedule in the middle of some
        syscall (a writeback coming due, a delayed close landing): its RPCs
        are not that syscall's.
        """
        saved = self._record
        record = self._record = RpcRecord()
        try:
            yield record
        finally:
            self._record = saved

    def _update(self, fileid: int, attrs: Attrs, *, own_change: bool = False) -> None:
        """Take fresh attributes (``nfs_update_inode``)."""
        self.cache_epoch += 1
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
                # nfs_update_inode: NFS_INO_INVALID_DATA, unless this host
                # has writers (the change could be its own writeback): then
                # NFS_INO_DATA_INVAL_DEFER (kept only while pages are cached,
                # nfs_set_cache_invalid), applied by the next open that finds
                # no other open of the file here (measured, docs/nfs-facts.md,
                # "Writes and data visibility").
                cache = self.files.get(fileid)
                if cache is not None:
                    if not self.writers.get(fileid):
                        cache.invalid = True
                    elif cache.holds_any:
                        cache.deferred = True
        else:
            if not cached.stamp_ns <= now < cached.stamp_ns + cached.timeo_ns:
                cached.timeo_ns = min(max(cached.timeo_ns * 2, low), high)
            cached.stamp_ns = now
        cached.attrs = attrs
        cached.read_ns = now
        cache = self.files.get(fileid)
        if cache is not None and attrs.size != cache.size and (not cache.has_dirty
                                                               or attrs.size > cache.size):
            # nfs_update_inode: the size follows the server's unless writes
            # are pending and the server's is smaller.
            cache.size = attrs.size

    def _forget(self, fileid: int) -> None:
        self.cache_epoch += 1
        self.attrs.pop(fileid, None)
        self.dentries.pop(fileid, None)
        self.files.pop(fileid, None)

    def _server_error(self, fileid: int, error: OSError) -> None:
        """An RPC on ``fileid`` failed: forget it, and remember a stale handle."""
        self._forget(fileid)  # a new cache_epoch
        if error.errno == errno.ESTALE:
            self.stale.add(fileid)
            self.access.pop(fileid, None)

    def fsstat(self, fileid: int) -> FsStat:
        """FSSTAT, sent on every statfs (``nfs_statfs``, fs/nfs/super.c: no cache);
        its post-op attributes are dropped, not cached."""
        if fileid in self.stale:
            raise simulated_oserror(errno.ESTALE)
        self._rpc("FSSTAT")
        try:
            self.server.getattr(fileid)  # the handle must still be live
        except OSError as error:
            self._server_error(fileid, error)
            raise
        return self.server.fsstat()

    def getattr(self, fileid: int, *, force: bool = False) -> Attrs:
        """Cached attributes while valid, else a GETATTR (``nfs_revalidate_inode``).

        Raises:
            OSError: ESTALE, at once and without an RPC, for an inode the
                server already called stale (``__nfs_revalidate_inode``
                checks ``NFS_STALE`` first).
        """
        cached = self.attrs.get(fileid)
        if cached is not None and not force and cached.valid_at(self.clock.now_ns):
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
            self.cache_epoch += 1
            cached.read_ns = _INVALID_NS

    def _cached_size(self, fileid: int) -> int:
        cached = self.attrs.get(fileid)
        return cached.attrs.size if cached is not None else self.getattr(fileid).size

    def _own_write(self, fileid: int) -> None:
        """Take the post-op attributes of this host's own WRITE."""
        if not self.kernel.read_delegations:
            self._v3_write_recall(fileid)
        self._update(fileid, self.server.getattr(fileid), own_change=True)

    # -- read delegations (NFSv4.x; simfs/_nfs/_delegations.py) ------------------

    def recall(self, fileid: int, *, delay: bool, opening: bool = False) -> None:
        """This host's call conflicts with read delegations other hosts hold of
        the file: they are recalled (``nfsd_break_deleg_cb``).

        ``delay``: the call is one knfsd answers NFS4ERR_DELAY (an OPEN for
        write, LINK, a RENAME over the file), which a v4 client sleeps
        ``NFS4_POLL_RETRY_MIN`` on and sends again (``nfs4_delay``); the
        refused attempt is recorded as ``NFS4ERR_DELAY`` (mountstats counts
        it as a ``delay`` event).  A v3 client is answered NFS3ERR_JUKEBOX
        and retries after 5 s.  SETATTR, REMOVE and a RENAME of the file
        itself wait in the server (``nfsd_wait_for_delegreturn``): no delay.
        ``opening``: the call is an OPEN, which keeps knfsd's state of the
        file (its ``fi_had_conflict``) alive.

        Raises:
            RecallDelay: ``delay`` and some delegation was recalled: nothing
                of the call has happened yet; the syscall layer sleeps and
                runs it again.
        """
        delegations = self.server.delegations
        if not delegations.any_of(fileid):
            return
        now = self.clock.now_ns
        down = [holder.host_name for holder in delegations.holders(fileid, self, now)
                if isinstance(holder, NfsClient) and holder.writeback is not None
                and not holder.writeback.alive()]
        if down:
            raise UnmodelledRecall(
                f"host {self.host_name!r} makes a call that recalls the read delegation "
                f"crashed host {down[0]!r} holds of file id {fileid}: knfsd cannot reach a "
                "crashed client, and Linux makes the call wait (NFS4ERR_DELAY retries, up "
                "to 15 s apart) until knfsd expires that client's lease, which simfs does "
                "not model (docs/nfs-facts.md, 'Read delegations')")
        stays = opening or bool(self.server.open_refs.get(fileid))
        if not delegations.recall(fileid, self, now, stays=stays):
            return
        if not delay:
            return
        if self.kernel.read_delegations:
            self._rpc("NFS4ERR_DELAY")
            raise RecallDelay(RETRY_MIN_NS)
        # A v3 client's LINK or RENAME over the file: NFS3ERR_JUKEBOX, which
        # nfs3_rpc_wrapper retries after NFS_JUKEBOX_RETRY_TIME (5 s; measured
        # 5.18 s and 5.16 s, compose/probe_delegation.py v3_caller).
        self._rpc("NFS3ERR_JUKEBOX")
        raise RecallDelay(JUKEBOX_RETRY_NS)

    def _v3_write_recall(self, fileid: int) -> None:
        """A v3 WRITE to a file another host holds a read delegation of.

        Raises:
            UnmodelledRecall: knfsd answers NFS3ERR_JUKEBOX and the v3 client
                sends the WRITE again 5 s later (NFS_JUKEBOX_RETRY_TIME; measured
                5.08 s), which simfs cannot do once the page cache has sent it.
        """
        delegations = self.server.delegations
        if not delegations.any_of(fileid):
            return
        holders = delegations.holders(fileid, self, self.clock.now_ns)
        if holders:
            name = holders[0].host_name if isinstance(holders[0], NfsClient) else "?"
            raise UnmodelledRecall(
                f"host {self.host_name!r} (NFSv3) writes file id {fileid}, of which host "
                f"{name!r} (NFSv4) holds a read delegation: knfsd answers the WRITE "
                "NFS3ERR_JUKEBOX and the v3 client sends it again 5 s later (measured "
                "5.08 s), which simfs does not model; mount both hosts with one NFS "
                "version (docs/nfs-facts.md, 'Read delegations')")

    def _background_flush(self, fileid: int) -> tuple[str, ...]:
        """A writeback the client starts on its own; returns the RPCs it sent."""
        with self.recording() as rpcs:
            try:
                self.flush(fileid, sync=False)
            except OSError:
                pass  # the file is gone on the server; the data has nowhere to go
        return tuple(rpcs)

    def _check_access(self, attrs: Attrs) -> None:
        """ACCESS once per inode, again after a mode change or a foreign change
        (``nfs_do_access``; the access cache is dropped with the attributes).

        The reply's post-op attributes refresh the inode as a GETATTR's do
        (``nfs3_proc_access`` calls ``nfs_refresh_inode``, fs/nfs/nfs3proc.c):
        a directory another host changed shows the change here, before the
        LOOKUP that follows saves the directory's verifier, so the new dentry
        verifies (measured, docs/nfs-facts.md: a directory made on the server
        after a host mounted hides a new file in it for acdirmin, as one made
        before does).

        Raises:
            OSError: ESTALE for a stale inode, or from the ACCESS call.
        """
        fileid = attrs.fileid
        if self.access.get(fileid) != attrs.mode:
            if fileid in self.stale:
                raise simulated_oserror(errno.ESTALE)
            self._rpc("ACCESS")
            try:
                fresh = self.server.getattr(fileid)
            except OSError as error:
                self._server_error(fileid, error)
                raise
            cached = self.attrs.get(fileid)
            changed = cached is not None and cached.attrs.change != fresh.change
            self._update(fileid, fresh)
            if not changed:
                self.access[fileid] = fresh.mode
            # else: the change left NFS_INO_INVALID_ACCESS set (nfs_update_inode),
            # so the entry nfs_access_add_cache adds is zapped at the next
            # check (nfs_access_get_cached_locked): another ACCESS then.

    # -- file data (the page cache itself is _pagecache.PageCacheOps) -----------

    def open_file(self, attrs: Attrs, *, created: bool, writable: bool = False,
                  label: str = "", dentry: tuple[int, str] | None = None,
                  readable: bool = True) -> Pin | None:
        """Count an open on this host; a file this open created needs no ACCESS.

        Returns the pin on ``dentry`` (directory, name), the name the open
        came through, which ``release`` takes back.
        """
        if not created:
            self._check_access(attrs)
        fileid = attrs.fileid
        if not self.open_count.get(fileid):
            cache = self.files.get(fileid)
            if cache is not None and cache.deferred:
                # nfs_inode_attach_open_context (fs/nfs/inode.c): the first
                # open context on the inode turns a deferred invalidation
                # into NFS_INO_INVALID_DATA.
                cache.invalid, cache.deferred = True, False
        self.open_count[fileid] = self.open_count.get(fileid, 0) + 1
        if writable:
            self.writers[fileid] = self.writers.get(fileid, 0) + 1
        if attrs.is_dir:
            return None
        if self.kernel.server_holds_opens:
            # NFSv4.x: the OPEN is state on the server, which keeps the file
            # while it is held, another host's unlink notwithstanding.
            self.server.opened(fileid)
            if self.kernel.read_delegations:
                self.server.delegations.opened(fileid, self, self.clock.now_ns,
                                               readable=readable, writable=writable,
                                               created=created)
        self.file_cache(fileid, label)
        if dentry is None:
            return None
        pin = Pin(*dentry)
        self.pins.setdefault(fileid, []).append(pin)
        return pin

    def lose_memory(self) -> None:
        """A crash: the page cache, unflushed writes included, is gone."""
        self.files.clear()

    def writes_pending(self, attrs: Attrs) -> bool:
        """Whether this host holds dirty pages of the file (a stat writes them back)."""
        cache = None if attrs.is_dir else self.files.get(attrs.fileid)
        return cache is not None and cache.has_dirty

    def stat_attrs(self, attrs: Attrs) -> Attrs:
        """The attributes a stat reports: ``nfs_getattr`` writes this host's
        dirty pages back first, so that size and mtime are right."""
        if not self.writes_pending(attrs):
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
        self.recall(fileid, delay=False)  # nfsd_setattr waits for the return
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
            cache.drop_pages(keep)
            tail = size % PAGE_SIZE
            if tail and cache.holds(keep - 1):
                cache.page(keep - 1).writable(self.server.store)[tail:] = bytes(PAGE_SIZE - tail)
        return attrs

