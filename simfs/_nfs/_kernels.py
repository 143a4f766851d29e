"""Kernel profiles: where one Linux NFS client release behaves unlike another.

A profile is data, one row per measured difference, so a trace or an
``explain`` can say which kernel a host runs and what that changes.  Every
value cites the run that measured it (DESIGN §3.5, "Kernel 6.12.117").
"""

from __future__ import annotations

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
        lock_grant_delay_s: seconds from the release of a lock held by
            another host until a blocked ``flock``/``lockf`` waiting for it
            is granted.  Linux 6.1 (measured): 6-40 ms, the NLM GRANTED
            callback, modelled as 0.  Linux 6.12.117 (measured): about 30.5 s, because the
            server drops the queued request and the client only retries on
            its own timer.  That timer runs from the block, not from the
            release (measured again in compose/vm.py's VM with
            compose/probe_lock_grant.py: blocked at 1.05 s, granted at
            32.5 s whether the holder released at 2 s or at 10 s; released
            at 35 s, granted at 63.3 s), which is lockd's re-sent LOCK every
            NLMCLNT_POLL_TIMEOUT (30 s, fs/lockd/clntproc.c nlmclnt_lock)
            plus about 1 s for the first call.  So 30.5 s after the release
            holds for a release about 1 s after the block (the parity test's
            case); a longer hold is granted sooner after its release (22.5 s
            for the 10 s hold), which this one number does not model.
        writeback_range_s: (earliest, latest) seconds after data is first
            dirtied at which the client writes it back on its own, before
            any close or fsync (measured on 6.1 and 6.12: 0.6 s to 31 s,
            nondeterministically; the flusher threads' dirty_expire of 30 s
            plus the 5 s wakeup interval bound the late end).
    """

    release: str
    lock_grant_delay_s: float
    writeback_range_s: tuple[float, float]

    def differences(self) -> str:
        """The profile as one line for traces and ``World.explain``."""
        return (f"kernel {self.release}: blocked lock granted {self.lock_grant_delay_s:g} s "
                f"after release; writeback {self.writeback_range_s[0]:g}-"
                f"{self.writeback_range_s[1]:g} s after the first dirty write")


# One table of differences.  6.1's measured 6-40 ms grant (the GRANTED
# callback over loopback) is modelled as immediate: it is below every poll
# interval the seeds use, and 0 keeps a hand-over at the release instant.
# 6.12's is the measured 30.5 s (for a release about 1 s after the block;
# see lock_grant_delay_s for how it varies with the hold).
KERNELS: Final[dict[str, KernelProfile]] = {
    "6.1": KernelProfile("6.1", lock_grant_delay_s=0.0, writeback_range_s=(0.6, 31.0)),
    "6.12": KernelProfile("6.12", lock_grant_delay_s=30.5, writeback_range_s=(0.6, 31.0)),
}

DEFAULT_KERNEL: Final = "6.1"


def kernel_profile(release: str) -> KernelProfile:
    """The profile of a kernel release.

    Raises:
        UnknownKernel: ``release`` is not one simfs has measurements of.
    """
    profile = KERNELS.get(release) if isinstance(release, str) else None
    if profile is None:
        raise UnknownKernel(
            f"unknown kernel {release!r}; simfs has measured profiles for "
            f"{', '.join(repr(name) for name in KERNELS)}")
    return profile


def running_kernel_profile(version: str) -> KernelProfile:
    """The profile of a running kernel, from its full version (``uname -r``).

    ``"6.12.117+deb12-amd64"`` is release 6.12; the real tier asks this so
    that a parity test on a real client checks the facts of that client's
    release (DESIGN §3.5).

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
