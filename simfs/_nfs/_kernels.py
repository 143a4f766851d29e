"""Kernel profiles: where one Linux NFS client release behaves unlike another.

A profile is data, one row per measured difference, so a trace or an
``explain`` can say which kernel a host runs and what that changes.  Every
value cites the run that measured it (docs/nfs-facts.md, "Kernel 6.12").
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
    """

    release: str
    lock_retry_s: tuple[float, float] | None
    writeback_range_s: tuple[float, float]

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
            locks = "blocked lock granted at another host's release (NLM GRANTED callback)"
        else:
            first, every = self.lock_retry_s
            locks = (f"blocked lock granted at the client's next retry, {first:g} s after "
                     f"the block then every {every:g} s (the server drops the queued request)")
        return (f"kernel {self.release}: {locks}; writeback {self.writeback_range_s[0]:g}-"
                f"{self.writeback_range_s[1]:g} s after the first dirty write")


# One table of differences.  6.1's measured 6-40 ms grant (the GRANTED
# callback over loopback) is modelled as immediate: it is below every poll
# interval the seeds use, and 0 keeps a hand-over at the release instant.
# 6.12's retries are the measured ones (see KernelProfile.lock_retry_s).
KERNELS: Final[dict[str, KernelProfile]] = {
    "6.1": KernelProfile("6.1", lock_retry_s=None, writeback_range_s=(0.6, 31.0)),
    "6.12": KernelProfile("6.12", lock_retry_s=(31.45, 30.75), writeback_range_s=(0.6, 31.0)),
}

DEFAULT_KERNEL: Final = "6.1"


def kernel_profile(release: str) -> KernelProfile:
    """The profile of a kernel release.

    Raises:
        UnknownKernel: ``release`` is not one simfs has measurements of.
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
    return profile


def running_kernel_profile(version: str) -> KernelProfile:
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
            return profile
    raise UnknownKernel(
        f"the running kernel {version!r} is of no release simfs has measured; "
        f"known: {', '.join(repr(name) for name in KERNELS)}")
