"""NFSv4.x read delegations: who holds one, which calls recall it, what that costs.

knfsd (Linux 6.1) hands a v4.1/4.2 client a read delegation on some opens;
another client's conflicting call recalls it.  Each rule below is one
measured fact, with the kernel function behind it (docs/nfs-facts.md,
"Read delegations", measured with compose/probe_delegation.py on Linux
6.1.0-57 client and knfsd):

- Grant (``nfs4_open_delegation``, ``nfs4_set_delegation``): an open of an
  existing regular file that reads (``O_RDONLY`` or ``O_RDWR``) gets one,
  unless another host holds the file open for write
  (``nfsd4_check_conflicting_opens``) or the file's delegations are blocked
  after a recall (below).  ``O_WRONLY`` gets none (no readable file to lease).
  Several hosts may hold one on a file at once.  A file this open created
  gets none (measured: ``O_RDWR|O_CREAT|O_EXCL``).
- Kept after the close: the holder's client returns an unused delegation at
  the second pass of its lease renewal after the last open of the file
  (``nfs4_renew_state`` -> ``nfs_expire_unreferenced_delegations``: one pass
  clears NFS_DELEGATION_REFERENCED, the next returns what is still clear,
  or marks it to go at its close while the file is open).  The renewal runs
  every 2/3 of the lease; knfsd's lease is 90 s, so every 60 s.  Measured
  with the VM's 10 s lease (passes every 6.7 s): gone 8.0-10.1 s after the
  close, within the rule's 6.7-13.3 s.
- Recall (``nfsd_break_deleg_cb``): another host's OPEN with write access,
  SETATTR (truncate, chmod), REMOVE, RENAME of the file or over it, LINK to
  it (from a v4 or a v3 host), takes every other host's delegation of the file
  (the holder's own calls recall nothing: ``nfsd_breaker_owns_lease``).
- The caller's wait: an OPEN, a LINK and a RENAME over the file are
  answered NFS4ERR_DELAY and the v4 client retries after
  ``NFS4_POLL_RETRY_MIN``, 0.1 s (``nfs4_delay``, fs/nfs/nfs4proc.c); by
  then the holder has returned it (measured 0.114-0.131 s against
  0.005-0.013 s without a delegation, one ``delay`` event and two OPENs in
  mountstats).  SETATTR, REMOVE and a RENAME of the file itself wait in the
  server for the return (``nfsd_wait_for_delegreturn``, at most
  ``NFSD_DELEGRETURN_TIMEOUT``) and are not delayed (measured 0.011-0.027 s).
  A v3 host's REMOVE is not delayed either; its WRITE is answered
  NFS3ERR_JUKEBOX and retried after 5 s (measured 5.08 s), which simfs
  cannot do once its page cache has sent the data: such a WRITE is refused
  by name (``UnmodelledRecall``).  A v3 LINK or RENAME over the file is
  answered NFS3ERR_JUKEBOX and retried after 5 s (measured 5.18, 5.16 s);
  a v3 truncate is not delayed (0.026 s).
- Blocked after a recall (``block_delegations``, ``delegation_blocked``):
  knfsd keeps recalled file handles in a pair of filters swapped every
  30 s (at a check more than 30 s after the last swap), so the file gets no
  delegation until the second swap: 30-60 s on a busy server (measured: the
  holder's reopen 0.5 s and 3 s after the recall got none, and a second
  conflicting open was not delayed; on a quiet server none at 35 s, one at
  70 s); and none while its ``nfs4_file`` lives with
  ``fi_had_conflict`` set, modelled as while any v4 host holds it open.
"""

from __future__ import annotations

from typing import Final

from .._engine._clock import NS_PER_S
from .._errors import SimfsError

# nfs4_delay: NFS4_POLL_RETRY_MIN (HZ/10), the first retry after NFS4ERR_DELAY.
RETRY_MIN_NS: Final = NS_PER_S // 10
# nfs3_rpc_wrapper: NFS_JUKEBOX_RETRY_TIME (5 * HZ), a v3 client's retry after JUKEBOX.
JUKEBOX_RETRY_NS: Final = 5 * NS_PER_S
# knfsd's default lease (nfsd4_lease, 90 s); the client renews every 2/3 of it.
LEASE_NS: Final = 90 * NS_PER_S
RENEW_NS: Final = LEASE_NS * 2 // 3
# delegation_blocked: the filters swap when the last swap is over 30 s old.
SWAP_NS: Final = 30 * NS_PER_S


class RecallDelay(SimfsError):
    """A call was answered NFS4ERR_DELAY while a delegation is recalled: the
    syscall layer sleeps ``wait_ns`` and sends the call again (``nfs4_delay``)."""

    def __init__(self, wait_ns: int) -> None:
        super().__init__(f"NFS4ERR_DELAY: retry in {wait_ns} ns")
        self.wait_ns = wait_ns


class UnmodelledRecall(SimfsError):
    """A call would recall a read delegation held by a host that crashed.

    knfsd cannot reach a crashed client's callback, so the delegation goes
    only when knfsd expires that client's lease; until then the caller is
    answered NFS4ERR_DELAY (or NFS3ERR_JUKEBOX) and keeps retrying.  simfs
    does not model the lease (docs/nfs-facts.md, "NFSv4.1 and 4.2"), so it
    says so instead of answering with a time Linux would not give.
    """


class _Delegation:
    __slots__ = ("closed_ns", "open", "referenced_ns")

    def __init__(self, now_ns: int) -> None:
        self.referenced_ns = now_ns  # the last open of the file on the holder
        self.open = 0  # the holder's opens of the file
        self.closed_ns = now_ns  # the holder's last close of it

    def returned_by(self, now_ns: int) -> bool:
        """Whether the holder's client has handed it back unasked by ``now_ns``.

        The renewal passes run at multiples of RENEW_NS; the second one after
        the last reference marks it, and it goes then, or at the close if
        the file is open.
        """
        if self.open:
            return False
        marked = (self.referenced_ns // RENEW_NS + 2) * RENEW_NS
        return now_ns >= max(marked, self.closed_ns)


class Delegations:
    """knfsd's read delegations of one export, and what it knows of opens for write."""

    def __init__(self) -> None:
        # fileid -> holder (a client) -> its delegation
        self._held: dict[int, dict[object, _Delegation]] = {}
        # fileid -> holder -> opens with write access (OPEN state)
        self._writers: dict[int, dict[object, int]] = {}
        self._had_conflict: set[int] = set()
        # delegation_blocked's filter pair (exact sets: no hash collisions).
        self._filters: tuple[set[int], set[int]] = (set(), set())
        self._new = 0
        self._entries = 0
        self._old_entries = 0
        self._swap_ns = 0

    # -- knfsd's recall filter ---------------------------------------------

    def _blocked(self, fileid: int, now_ns: int) -> bool:
        if self._entries == 0:
            return False
        if now_ns - self._swap_ns > SWAP_NS:
            self._entries -= self._old_entries
            self._old_entries = self._entries
            self._new = 1 - self._new
            self._filters[self._new].clear()
            self._swap_ns = now_ns
        return fileid in self._filters[0] or fileid in self._filters[1]

    def _block(self, fileid: int, now_ns: int) -> None:
        self._filters[self._new].add(fileid)
        if self._entries == 0:
            self._swap_ns = now_ns
        self._entries += 1

    # -- the holder's side -------------------------------------------------

    def _live(self, fileid: int, now_ns: int) -> dict[object, _Delegation]:
        """The file's delegations still held at ``now_ns`` (returned ones dropped)."""
        held = self._held.get(fileid)
        if not held:
            return {}
        for holder in [h for h, d in held.items() if d.returned_by(now_ns)]:
            del held[holder]
        if not held:
            del self._held[fileid]
        return held

    def opened(self, fileid: int, holder: object, now_ns: int, *, readable: bool,
               writable: bool, created: bool) -> bool:
        """A v4 host's OPEN of a regular file; whether it holds a delegation after.

        ``nfs4_open_delegation``: one for an open that reads, unless another
        host has the file open for write or its delegations are blocked.
        """
        if writable:
            writers = self._writers.setdefault(fileid, {})
            writers[holder] = writers.get(holder, 0) + 1
        held = self._live(fileid, now_ns)
        delegation = held.get(holder)
        if delegation is None and readable and not created and not any(
                count for other, count in self._writers.get(fileid, {}).items()
                if other is not holder) and fileid not in self._had_conflict \
                and not self._blocked(fileid, now_ns):
            delegation = self._held.setdefault(fileid, {})[holder] = _Delegation(now_ns)
        if delegation is None:
            return False
        delegation.referenced_ns = now_ns  # nfs_mark_delegation_referenced
        delegation.open += 1
        return True

    def closed(self, fileid: int, holder: object, now_ns: int, *, writable: bool,
               last_on_server: bool) -> None:
        """The host's CLOSE; ``last_on_server``: no v4 host holds the file open now."""
        if writable:
            writers = self._writers.get(fileid, {})
            count = writers.get(holder, 0) - 1
            if count > 0:
                writers[holder] = count
            else:
                writers.pop(holder, None)
                if not writers:
                    self._writers.pop(fileid, None)
        delegation = self._held.get(fileid, {}).get(holder)
        if delegation is not None and delegation.open:
            delegation.open -= 1
            delegation.closed_ns = now_ns
        if last_on_server:
            self._had_conflict.discard(fileid)  # the nfs4_file goes

    # -- another host's conflicting call -------------------------------------

    def any_of(self, fileid: int) -> bool:
        """Whether any host may hold a delegation of the file (the fast path)."""
        return fileid in self._held

    def any(self) -> bool:
        """Whether any host may hold a delegation of any file (every v3 world: no)."""
        return bool(self._held)

    def holders(self, fileid: int, caller: object, now_ns: int) -> list[object]:
        """The hosts other than ``caller`` holding a delegation of the file."""
        return [holder for holder in self._live(fileid, now_ns) if holder is not caller]

    def recall(self, fileid: int, caller: object, now_ns: int, *, stays: bool) -> bool:
        """``caller``'s conflicting call: every other host's delegation of the
        file is recalled (returned before the caller's retry); whether any was.

        ``stays``: knfsd's state of the file outlives the recall (some host
        holds it open, or the call is an OPEN), so ``fi_had_conflict`` keeps
        new delegations off it until the last close.
        """
        held = self._live(fileid, now_ns)
        others = [holder for holder in held if holder is not caller]
        if not others:
            return False
        for holder in others:
            del held[holder]
        if not held:
            del self._held[fileid]
        if stays:
            self._had_conflict.add(fileid)
        self._block(fileid, now_ns)
        return True
