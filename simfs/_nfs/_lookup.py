"""Name lookup: the dentry cache and the one rule for trusting it.

``NfsClient.verdict`` is what the Linux client decides from its caches for
one name (fs/nfs/dir.c: ``nfs_lookup_revalidate`` -> ``nfs_neg_need_reval``,
``nfs_check_verifier``).  ``lookup`` acts on it and ``Host.belief`` reports
it (``_beliefs.py``), so an explanation cannot disagree with the behaviour.
A verdict is a trusted file id or one of the reason codes below, so the
stat path allocates nothing to decide.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Final

from .._errors import simulated_oserror
from ._server import DIR, LINK, NAME_MAX, check_name_length

if TYPE_CHECKING:
    from .._engine._clock import VirtualClock
    from ._client import CachedAttrs
    from ._kernels import KernelProfile
    from ._mount import MountOptions
    from ._server import Attrs, Server

# A path component no name can equal: "search the start directory, then go
# to the export root" (a relative path that climbs out of the cwd with "..").
UP_FROM_START: Final = "/"
# What a path's end says beyond its names, which normpath drops (no name
# contains "/"): a trailing slash (the object must be a directory, its last
# link followed) and a final "." (``last_type`` LAST_DOT in fs/namei.c).
LAST_SLASH: Final = "/slash"
LAST_DOT: Final = "/dot"
LAST_MARKERS: Final = (LAST_SLASH, LAST_DOT)

# Lookup intents, after the kernel's LOOKUP_* flags.
OPEN: Final = 1
CREATE: Final = 2
EXCL: Final = 4
RENAME_TARGET: Final = 8

# Verdicts other than a trusted file id: what the lookup does, and why.
NEGATIVE: Final = "negative dentry"             # ENOENT from cache
CREATE_NEGATIVE: Final = "create"               # ENOENT from cache; the CREATE settles it
REVALIDATE: Final = "revalidate"                # GETATTR the directory, then decide
UNCACHED: Final = "uncached"                    # LOOKUP
NO_NEGATIVE: Final = "lookupcache"              # LOOKUP
NO_CACHE: Final = "lookupcache=none"            # LOOKUP
EXCLUSIVE: Final = "exclusive"                  # LOOKUP
UNVERIFIED: Final = "unverified"                # LOOKUP

REASONS: Final = {
    CREATE_NEGATIVE: "a create trusts a negative entry (nfs_neg_need_reval)",
    REVALIDATE: "the directory's cached attributes expired; the next lookup revalidates "
                "it (GETATTR) and keeps the entry only if the directory is unchanged",
    UNCACHED: "nothing is cached for the name; the next lookup asks the server (LOOKUP)",
    NO_NEGATIVE: "never trusts a negative entry; the next lookup asks the server (LOOKUP)",
    NO_CACHE: "lookupcache=none trusts no entry; the next lookup asks the server (LOOKUP)",
    EXCLUSIVE: "an exclusive create looks the name up afresh",
    UNVERIFIED: "the entry predates a change seen in its directory (or the reply that made "
                "it showed one); the next lookup asks the server (LOOKUP)",
}


# Paths whose cache-only walk a client remembers at most (then it starts over).
_WALK_MEMO_SIZE = 4096


# No name of this many characters or fewer can reach NAME_MAX bytes (UTF-8
# takes at most 4 bytes a character): the walk counts bytes only past it.
_SHORT_NAME: Final = NAME_MAX // 4


def _enoent() -> OSError:
    return simulated_oserror(errno.ENOENT)


class LookupOps:
    """The dentry half of ``NfsClient``."""

    server: Server
    clock: VirtualClock
    options: MountOptions
    kernel: KernelProfile
    root: int
    attrs: dict[int, CachedAttrs]
    dentries: dict[int, dict[str, tuple[int | None, int]]]
    access: dict[int, int]
    stale: set[int]
    # Bumped by every change to attrs, dentries or access (_client.py and
    # here): a remembered cache-only walk stands while it is unchanged.
    cache_epoch: int
    walk_memo: dict[tuple[int, tuple[str, ...], bool], tuple[int, int, Attrs | str]]

    def _rpc(self, name: str, nbytes: int = 0) -> None:
        raise NotImplementedError

    def getattr(self, fileid: int, *, force: bool = False) -> Attrs:
        raise NotImplementedError

    def _update(self, fileid: int, attrs: Attrs, *, own_change: bool = False) -> None:
        raise NotImplementedError

    def _server_error(self, fileid: int, error: OSError) -> None:
        raise NotImplementedError

    def _check_access(self, attrs: Attrs) -> None:
        raise NotImplementedError

    def _set_dentry(self, dir_id: int, name: str, fileid: int | None,
                    verifier: int | None = None) -> None:
        """``nfs_set_verifier``: ``verifier`` defaults to the directory's current one."""
        self.cache_epoch += 1
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

    def _drop_dentry(self, dir_id: int, name: str) -> None:
        """``d_drop``: a failed create forgets the name, so the next lookup asks."""
        self.cache_epoch += 1
        entries = self.dentries.get(dir_id)
        if entries is not None:
            entries.pop(name, None)

    def verdict(self, dir_id: int, name: str, intent: int = 0, *,
                parent_fresh: bool = False) -> int | str:
        """What ``lookup`` would do for ``name`` now, from the caches alone.

        Returns the trusted file id of a positive entry, or a reason code:
        ``NEGATIVE``/``CREATE_NEGATIVE`` (ENOENT from cache), ``REVALIDATE``
        (GETATTR the directory first), or one of the codes that mean a
        LOOKUP (``REASONS`` says why).  A trusted entry lasts while the
        directory's cached attributes do (``CachedAttrs.valid_at``).
        """
        options = self.options
        entries = self.dentries.get(dir_id)
        dentry = None if entries is None else entries.get(name)
        if dentry is None:
            return UNCACHED
        fileid, verifier = dentry
        if fileid is None:
            if intent & CREATE:
                return CREATE_NEGATIVE
            if options.lookupcache != "all":
                return NO_NEGATIVE
        elif intent & EXCL:
            return EXCLUSIVE
        if options.lookupcache == "none":
            return NO_CACHE
        cached = self.attrs.get(dir_id)
        if cached is None or cached.verifier != verifier:
            return UNVERIFIED
        if not parent_fresh and not cached.valid_at(self.clock.now_ns):
            return REVALIDATE
        return NEGATIVE if fileid is None else fileid

    def lookup(self, dir_id: int, name: str, intent: int = 0) -> Attrs:
        """Resolve one name in a directory, from cache or with a LOOKUP.

        Raises:
            FileNotFoundError: the name is absent, or a trusted negative
                dentry says so without asking the server.
            OSError: ENAMETOOLONG for a name over the server's namelen.
        """
        if len(name) > _SHORT_NAME:
            check_name_length(name)
        verdict = self.verdict(dir_id, name, intent)
        if verdict is REVALIDATE:
            self.getattr(dir_id)  # the GETATTR; a change bumps the verifier
            verdict = self.verdict(dir_id, name, intent, parent_fresh=True)
        if verdict is NEGATIVE or verdict is CREATE_NEGATIVE:
            raise _enoent()
        if isinstance(verdict, int):
            force = bool(intent & OPEN) and self.options.cto
            if force:
                # nfs_lookup_verify_inode (fs/nfs/dir.c): the close-to-open
                # GETATTR is for regular files and directories; a link met
                # on the way to an open is trusted while its attributes are.
                known = self.attrs.get(verdict)
                force = known is None or not known.attrs.is_link
            try:
                return self.getattr(verdict, force=force)
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
        (docs/nfs-facts.md, "Attribute and dentry caches", measured): the walk
        re-LOOKUPs the directory, sees it changed, and distrusts its negative
        entries.  Only where this reply is the first to show the change: a
        walk's first pass through a directory sends ACCESS before the LOOKUP,
        and that reply's attributes show it already (``_check_access``), so the
        dentry verifies (docs/nfs-facts.md, "A directory made before or after
        the mount").
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
        if self.kernel.lookup_dir_attrs:
            # The reply carries the directory's post-op attributes (NFSv3;
            # NFSv4's LOOKUP compound does not: KernelProfile.lookup_dir_attrs).
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
        if len(name) > _SHORT_NAME:
            check_name_length(name)
        dentry = self._cached_dentry(dir_id, name)
        if dentry is None:
            return None
        try:
            return self.lookup(dir_id, name, intent)
        except FileNotFoundError:
            return None

    def cached_walk(self, start: int, components: list[str], *,
                    follow: bool) -> Attrs | str | None:
        """What a walk without intent finds from the caches alone, or None.

        A poller stats the same missing name every tick: while its
        directories' attributes, access and entries are all still trusted,
        the kernel answers from the dcache without an RPC
        (``nfs_lookup_revalidate`` keeps the dentry), and so does this,
        without the general walk's exceptions.  Returns the object's
        attributes, ``NEGATIVE`` where a trusted negative entry ends the walk
        (ENOENT), or None wherever the general walk would send an RPC or do
        more than look a cache up (an expired entry, a symbolic link to
        follow, a name under a non-directory, a climb out of the working
        directory).  It changes no cache, so a None costs the caller only the
        general walk, which then gives every answer; where this gives one,
        the general walk gives the same with no RPC (tests/simfs/
        test_cached_walk.py compares them over many cache states).

        A poller asks the same path every tick, so the answer is remembered
        per path until the first attributes it read expire or the caches
        change (``cache_epoch``): a tick then costs one dict lookup.
        """
        now = self.clock.now_ns
        key = (start, tuple(components), follow)
        known = self.walk_memo.get(key)
        if known is not None and known[0] == self.cache_epoch and now < known[1]:
            return known[2]
        found, expires_ns = self._walk_caches(start, components, follow, now)
        if found is not None:
            if len(self.walk_memo) >= _WALK_MEMO_SIZE:
                self.walk_memo.clear()
            self.walk_memo[key] = (self.cache_epoch, expires_ns, found)
        return found

    def _walk_caches(self, start: int, components: list[str], follow: bool,
                     now: int) -> tuple[Attrs | str | None, int]:
        """``cached_walk``'s answer, and until when it stands unless a cache changes.

        Every answer rests on the cached attributes it read; it stands until
        the first of them expires (``CachedAttrs.expires_ns``), or until the
        caches change (``cache_epoch``), whichever comes first.
        """
        if components and (components[0] == UP_FROM_START or components[-1] in LAST_MARKERS):
            return None, 0
        cached = self.attrs.get(start)
        if cached is None or not cached.valid_at(now):
            return None, 0  # getattr would send a GETATTR
        expires_ns = cached.expires_ns
        attrs = cached.attrs
        last = len(components) - 1
        access = self.access
        # ``kind`` compared in place of the is_dir/is_link properties: a
        # property call per step.  A poll whose answer is remembered skips
        # this loop altogether.
        for index, name in enumerate(components):
            if attrs.kind != DIR or access.get(attrs.fileid) != attrs.mode:
                return None, 0  # ENOTDIR, or _check_access would send an ACCESS
            verdict = self.verdict(attrs.fileid, name)
            if verdict is NEGATIVE:
                return NEGATIVE, expires_ns
            if verdict.__class__ is not int:
                return None, 0  # a LOOKUP or a revalidating GETATTR
            cached = self.attrs.get(verdict)
            if cached is None or not cached.valid_at(now):
                return None, 0
            expires_ns = min(expires_ns, cached.expires_ns)
            attrs = cached.attrs
            if attrs.kind == LINK and (follow or index < last):
                return None, 0  # the general walk follows links (fs/namei.c)
        return attrs, expires_ns

    def walk(self, start: int, components: list[str]) -> Attrs:
        """Resolve directories one by one; every one must be searchable.

        A leading ``UP_FROM_START`` searches ``start`` (a working directory)
        first, then resolves the rest from the export root: ``..`` from a
        directory another host removed is ESTALE (docs/nfs-facts.md, "Stale
        handles", measured).
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
