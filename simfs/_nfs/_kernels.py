"""Kernel profiles: where one Linux NFS client release behaves unlike another.

A profile is data, one row per measured difference, so a trace or an
``explain`` can say which kernel a host runs and what that changes.  Every
value cites the run that measured it (docs/nfs-facts.md, "Kernel 6.12").

A profile is also per NFS version: ``vers=4.1`` and ``vers=4.2`` mounts
follow the release's v4 profile (``V4_KERNELS``), measured with
compose/probe_v41.py on two hosts that are each their own NFSv4.x client of
one knfsd (docs/nfs-facts.md, "NFSv4.1 and 4.2").  Everything the v3 model
has was re-measured there; the rows below are what came out different.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from .._errors import SimfsError


class UnknownKernel(SimfsError, ValueError):
    """A host asked for a kernel release that simfs has no measurements of."""


@dataclass(frozen=True, slots=True)
class KernelProfile:
    """What one client kernel release does where releases differ.

    Attributes:
        release: the kernel release, e.g. ``"6.1"``.
        lock_retry_s: how a ``flock``/``lockf`` blocked on another host's
            lock learns of the release.  ``None``: the server's NLM GRANTED
            callback hands it over at the release (Linux 6.1, measured 6-40
            ms, modelled as 0).  ``(first, every)``: the server drops the
            queued request and the client's lockd re-sends its LOCK on its
            own timer, counted from the block: the first retry ``first``
            seconds after the block, then every ``every`` seconds, and the
            waiter is granted at the first retry at or after the release.
            Linux 6.12.117, measured in compose/vm.py's VM with
            compose/probe_lock_grant.py: blocked at 1.05 s, granted at 32.5 s
            whether the holder released at 2 s or at 10 s; released at 35 s,
            granted at 63.3 s.  That is NLMCLNT_POLL_TIMEOUT (30 s,
            fs/lockd/clntproc.c nlmclnt_lock) plus the retry's own calls under
            emulation: first retry 31.45 s after the block, then every 30.75 s.
        writeback_range_s: (earliest, latest) seconds after data is first
            dirtied at which the client writes it back on its own, before
            any close or fsync (measured on 6.1 and 6.12: 0.6 s to 31 s,
            nondeterministically; the flusher threads' dirty_expire of 30 s
            plus the 5 s wakeup interval bound the late end).
        vers: the NFS version the profile is of: ``"3"``, ``"4.1"``, ``"4.2"``.
        server_holds_opens: whether the server keeps a file another host
            removed while this host has it open.  NFSv3: no, the server
            knows no opens, and the holder's next call that asks it is
            ESTALE.  NFSv4.1 and 4.2: yes, the host's OPEN state is an open
            file on the server, so the holder's ``fstat`` shows ``st_nlink``
            0 and its reads get the data until it closes (measured on Linux
            6.1, compose/probe_v41.py ``stale_open_file_removed_by_other_host``).
        lookup_dir_attrs: whether a LOOKUP's reply refreshes the directory's
            attributes.  NFSv3: yes (LOOKUP3resok carries the directory's
            post-op attributes).  NFSv4.x: no, the client's LOOKUP compound
            is PUTFH, LOOKUP, GETFH, GETATTR of the object only
            (``nfs4_xdr_enc_lookup``, fs/nfs/nfs4xdr.c), so a directory
            another host changed does not show it at a LOOKUP in it: the new
            dentry verifies, and a negative entry made after it is trusted
            for acdirmin (the real tier over v4.1 found it:
            ``test_a_negative_entry_made_in_a_directory_just_made_elsewhere``).
        read_delegations: whether the server hands this host read delegations
            and its conflicting OPEN, LINK or RENAME over a delegated file
            waits for another host's to be recalled.  NFSv3: no (there are
            none).  NFSv4.1 and 4.2: yes, by the rules of
            ``simfs/_nfs/_delegations.py`` (measured on Linux 6.1 with
            compose/probe_delegation.py: the conflicting open waits the
            client's first retry, 0.1 s).
    """

    release: str
    lock_retry_s: tuple[float, float] | None
    writeback_range_s: tuple[float, float]
    vers: str = "3"
    server_holds_opens: bool = False
    lookup_dir_attrs: bool = True
    read_delegations: bool = False

    def lock_granted_at(self, blocked_s: float, released_s: float) -> float:
        """When a waiter that blocked at ``blocked_s`` gets a lock another
        host released at ``released_s`` (both on one clock, seconds).

        Raises:
            ValueError: the release comes before the block.
        """
        if released_s < blocked_s:
            raise ValueError(f"released at {released_s:g} s, before the block at "
                             f"{blocked_s:g} s: the waiter would not have blocked")
        if self.lock_retry_s is None:
            return released_s
        first, every = self.lock_retry_s
        retry = blocked_s + first
        if released_s > retry:
            retry += math.ceil((released_s - retry) / every) * every
        return retry

    def differences(self) -> str:
        """The profile as one line for traces and ``World.explain``."""
        if self.lock_retry_s is None:
            callback = "NLM GRANTED" if self.vers == "3" else "CB_NOTIFY_LOCK"
            locks = f"blocked lock granted at another host's release ({callback} callback)"
        else:
            first, every = self.lock_retry_s
            locks = (f"blocked lock granted at the client's next retry, {first:g} s after "
                     f"the block then every {every:g} s (the server drops the queued request)")
        text = (f"kernel {self.release}: {locks}; writeback {self.writeback_range_s[0]:g}-"
                f"{self.writeback_range_s[1]:g} s after the first dirty write")
        if self.vers != "3":
            text += (f"; NFSv{self.vers}: a file open here stays on the server after "
                     "another host removes it, until the last close (OPEN state); a LOOKUP "
                     "does not refresh its directory's attributes; an open that reads gets a "
                     "read delegation, and another host's open for write, LINK or RENAME "
                     "over the file waits 0.1 s for its recall (NFS4ERR_DELAY)")
        return text


# One table of differences.  6.1's measured 6-40 ms grant (the GRANTED
# callback over loopback) is modelled as immediate: it is below every poll
# interval the seeds use, and 0 keeps a hand-over at the release instant.
# 6.12's retries are the measured ones (see KernelProfile.lock_retry_s).
KERNELS: Final[dict[str, KernelProfile]] = {
    "6.1": KernelProfile("6.1", lock_retry_s=None, writeback_range_s=(0.6, 31.0)),
    "6.12": KernelProfile("6.12", lock_retry_s=(31.45, 30.75), writeback_range_s=(0.6, 31.0)),
}

# (release, version) -> the release's profile over NFSv4.x.  Measured on
# 6.1 over v4.1 (compose/probe_v41.py); 4.2 adds operations (COPY, SEEK,
# ALLOCATE) but none of the caching, state or lock rules these rows are
# about, and the probe's 4.2 run agreed with 4.1 on each (docs/nfs-facts.md).
V4_KERNELS: Final[dict[tuple[str, str], KernelProfile]] = {
    ("6.1", vers): KernelProfile("6.1", lock_retry_s=None, writeback_range_s=(0.6, 31.0),
                                 vers=vers, server_holds_opens=True, lookup_dir_attrs=False,
                                 read_delegations=True)
    for vers in ("4.1", "4.2")
}

DEFAULT_KERNEL: Final = "6.1"


def kernel_profile(release: str, vers: str = "3") -> KernelProfile:
    """The profile of a kernel release over NFS version ``vers``.

    Raises:
        UnknownKernel: ``release`` is not one simfs has measurements of, or
            not over that NFS version.
    """
    if not isinstance(release, str):
        raise UnknownKernel(
            f"kernel must be a release as a str, e.g. kernel='6.1', not {release!r} "
            f"({type(release).__name__}); simfs has measured profiles for "
            f"{', '.join(repr(name) for name in KERNELS)}")
    profile = KERNELS.get(release)
    if profile is None:
        raise UnknownKernel(
            f"unknown kernel {release!r}; simfs has measured profiles for "
            f"{', '.join(repr(name) for name in KERNELS)}")
    if vers == "3":
        return profile
    v4 = V4_KERNELS.get((release, vers))
    if v4 is None:
        raise UnknownKernel(_v4_refusal(release, vers))
    return v4


def _v4_refusal(release: str, vers: str) -> str:
    measured = ", ".join(f"kernel={r!r} with vers={v}" for r, v in V4_KERNELS)
    return (f"kernel {release!r} has no measured NFSv{vers} profile (simfs has {measured}, "
            f"and vers=3 on {', '.join(repr(name) for name in KERNELS)})")


def running_kernel_profile(version: str, vers: str = "3") -> KernelProfile:
    """The profile of a running kernel, from its full version (``uname -r``).

    ``"6.12.117+deb12-amd64"`` is release 6.12; the real tier asks this so
    that a parity test on a real client checks the facts of that client's
    release (docs/nfs-facts.md, "Kernel 6.12").

    Raises:
        UnknownKernel: the version is not of a release simfs has measured.
    """
    for release, profile in KERNELS.items():
        # "6.1" + "." keeps 6.12.117 from matching 6.1.
        if version == release or version.startswith((release + ".", release + "-")):
            return profile if vers == "3" else kernel_profile(release, vers)
    raise UnknownKernel(
        f"the running kernel {version!r} is of no release simfs has measured; "
        f"known: {', '.join(repr(name) for name in KERNELS)}")
