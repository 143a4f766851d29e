"""What NFS conditions to draw: mount options, timings, fault rules and plans.

Each strategy shrinks toward the least surprising value: Linux's default
options, no delay, no fault.
"""

from __future__ import annotations

import errno
import functools
from collections.abc import Mapping, Sequence
from typing import Final, TypeVar

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from .._nfs._faults import FAULTABLE_OPS, CloseDelay, FaultPlan, FaultRule, HostCrash
from .._nfs._mount import (
    DEFAULT_ACDIRMAX,
    DEFAULT_ACDIRMIN,
    DEFAULT_ACREGMAX,
    DEFAULT_ACREGMIN,
)

# Named mount profiles, the least surprising first (a failing example
# shrinks toward it).  Each is one a deployment really uses: nfs(5) defaults;
# actimeo=0 and noac, the usual "make NFS coherent" advice; lookupcache
# positive/none, which stop trusting negative (or all) dentries; nocto,
# which turns close-to-open revalidation off; a short acdirmin, the setting
# seed 000's authors measured (docs/nfs-facts.md, "Attribute and dentry
# caches": 2.05 s median stall).
MOUNT_PROFILES: Final[Mapping[str, str]] = {
    "defaults": "vers=3",
    "actimeo=0": "vers=3,actimeo=0",
    "noac": "vers=3,noac",
    "lookupcache=positive": "vers=3,lookupcache=positive",
    "lookupcache=none": "vers=3,lookupcache=none",
    "nocto": "vers=3,nocto",
    "short-acdirmin": "vers=3,acdirmin=3,acdirmax=3",
}

# The errnos each syscall really returns over NFSv3 (nfs(5) "hard"/"soft",
# RFC 1813 status codes as the Linux client maps them, docs/design.md, "The NFS
# model", and docs/nfs-facts.md), the likeliest first.  A close reports a
# failed writeback (EIO, ENOSPC, EDQUOT): NFS flushes at close.  ESTALE is the
# answer to a handle another host removed.
ERRNOS_BY_OP: Final[Mapping[str, tuple[int, ...]]] = {
    "open": (errno.EIO, errno.ESTALE, errno.ENOENT, errno.EACCES, errno.ENOSPC),
    "read": (errno.EIO, errno.ESTALE),
    "write": (errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.ESTALE),
    "close": (errno.EIO, errno.ENOSPC, errno.EDQUOT),
    "fsync": (errno.EIO, errno.ENOSPC, errno.EDQUOT),
    "stat": (errno.ESTALE, errno.EIO, errno.ENOENT),
    "fstat": (errno.ESTALE, errno.EIO),
    "listdir": (errno.ESTALE, errno.EIO, errno.ENOENT),
    "scandir": (errno.ESTALE, errno.EIO, errno.ENOENT),
    "mkdir": (errno.EEXIST, errno.ESTALE, errno.ENOSPC, errno.EIO),
    "rmdir": (errno.ENOTEMPTY, errno.EBUSY, errno.ESTALE, errno.ENOENT),
    "unlink": (errno.EBUSY, errno.ENOENT, errno.ESTALE, errno.EIO, errno.EACCES),
    "rename": (errno.EBUSY, errno.ESTALE, errno.ENOENT, errno.EIO),
    "link": (errno.EEXIST, errno.ESTALE, errno.EIO),
    "utime": (errno.ESTALE, errno.EIO, errno.EPERM),
    "ftruncate": (errno.EIO, errno.ESTALE),
    "truncate": (errno.EIO, errno.ESTALE, errno.ENOENT),
    "lseek": (errno.ESTALE,),
    "chmod": (errno.EPERM, errno.ESTALE),
    "access": (errno.EACCES, errno.ESTALE),
    "flock": (errno.ENOLCK, errno.EIO),
    "lockf": (errno.ENOLCK, errno.EIO),
}

T = TypeVar("T")


def _least_surprising(default: T, others: SearchStrategy[T]) -> SearchStrategy[T]:
    """``default``, or a value of ``others``; shrinks to ``default``."""
    return st.one_of(st.just(default), others)


# -- mount options --------------------------------------------------------------------------


def mount_options(profiles: Sequence[str] | None = None, *,
                  custom: bool = True) -> SearchStrategy[str]:
    """nfs(5) option strings for ``World.host(name, mount=...)``; shrinks to ``"vers=3"``.

    Args:
        profiles: names from ``MOUNT_PROFILES`` to draw from (all if None);
            the first is the one a failure shrinks toward.
        custom: also draw attribute-cache timeouts from realistic ranges
            (acregmin 0-10 s up to acregmax 60 s... 0-600 s, acdirmin 0-60 s,
            acdirmax up to 600 s), lookupcache and cto, each defaulting to
            Linux's value.

    Raises:
        ValueError: an unknown profile name, or no profile and no custom.
    """
    names = list(MOUNT_PROFILES) if profiles is None else list(profiles)
    unknown = [name for name in names if name not in MOUNT_PROFILES]
    if unknown:
        raise ValueError(f"unknown mount profiles {unknown}; profiles: "
                         f"{', '.join(MOUNT_PROFILES)}")
    if not names and not custom:
        raise ValueError("mount_options needs at least one profile or custom=True")
    named = [st.sampled_from([MOUNT_PROFILES[name] for name in names])] if names else []
    return st.one_of(*named, *([_custom_mount()] if custom else []))


# The strategies _custom_mount draws from, made once: Hypothesis checks a
# strategy the first time it draws from it, which made each example's mount
# options cost more than its world (the README marker example's search).
_ACREGMIN: Final = _least_surprising(DEFAULT_ACREGMIN, st.integers(0, 10))
_ACDIRMIN: Final = _least_surprising(DEFAULT_ACDIRMIN, st.integers(0, 60))
_LOOKUPCACHE: Final = st.sampled_from(("all", "positive", "none"))
_CTO: Final = st.booleans().map(lambda flipped: not flipped)


@functools.lru_cache(maxsize=128)  # one per minimum: 11 acregmin and 61 acdirmin values
def _maximum(default: int, minimum: int) -> SearchStrategy[int]:
    return _least_surprising(max(default, minimum), st.integers(minimum, 600))


@st.composite
def _custom_mount(draw: st.DrawFn) -> str:
    acregmin = draw(_ACREGMIN)
    acregmax = draw(_maximum(DEFAULT_ACREGMAX, acregmin))
    acdirmin = draw(_ACDIRMIN)
    acdirmax = draw(_maximum(DEFAULT_ACDIRMAX, acdirmin))
    lookupcache = draw(_LOOKUPCACHE)
    cto = draw(_CTO)
    parts = ["vers=3"]
    for name, value, default in (("acregmin", acregmin, DEFAULT_ACREGMIN),
                                 ("acregmax", acregmax, DEFAULT_ACREGMAX),
                                 ("acdirmin", acdirmin, DEFAULT_ACDIRMIN),
                                 ("acdirmax", acdirmax, DEFAULT_ACDIRMAX)):
        if value != default:
            parts.append(f"{name}={value}")
    if lookupcache != "all":
        parts.append(f"lookupcache={lookupcache}")
    if not cto:
        parts.append("nocto")
    return ",".join(parts)


# -- timings --------------------------------------------------------------------------------


def delays(max_seconds: float, *, grid: float = 0.01) -> SearchStrategy[float]:
    """Virtual seconds in [0, max_seconds] on a ``grid``; shrinks to 0.

    A grid keeps examples readable and makes two events at one instant
    common, which is where the schedule decides who runs first.

    Raises:
        ValueError: a negative bound or a grid that is not > 0.
    """
    if not max_seconds >= 0:
        raise ValueError(f"max_seconds must be >= 0, not {max_seconds!r}")
    if not grid > 0:
        raise ValueError(f"grid must be > 0 seconds, not {grid!r}")
    steps = int(max_seconds / grid + 1e-9)
    return st.integers(0, steps).map(lambda n: round(n * grid, 9))


def close_delays(paths: Sequence[str] = ("/shared/*",), *, hosts: Sequence[str | None] = (None,),
                 max_seconds: float = 5.0) -> SearchStrategy[CloseDelay]:
    """A ``CloseDelay``: the close of a matching file lands up to ``max_seconds`` late.

    This is the writeback window of docs/design.md, "The NFS model" (async
    saves; the client flushes dirty pages at close): until it lands, a
    silly-renamed file stays and another host does not see the data.  Shrinks
    to the first path, the first host and no delay.
    """
    return st.builds(CloseDelay, st.sampled_from(list(paths)), delays(max_seconds),
                     st.sampled_from(list(hosts)))


# -- faults ---------------------------------------------------------------------------------


def fault_rules(ops: Sequence[str] | None = None, *, paths: Sequence[str] = ("/shared/*",),
                hosts: Sequence[str | None] = (None,), max_nth: int = 5,
                max_delay: float = 5.0, horizon: float = 60.0) -> SearchStrategy[FaultRule]:
    """A ``FaultRule``: an errno this op really returns over NFS, or a delay.

    Shrinks toward the first op, path and host, the op's likeliest errno, on
    its first matching call (``nth=1``), with no delay.

    Args:
        ops: syscall names (``FAULTABLE_OPS``); all if None.
        paths: globs a rule may match, e.g. ``"/shared/ckpt/*"``.
        hosts: host names a rule may be limited to (None: every host).
        max_nth: the largest n-th matching call a rule may fire on.
        max_delay: the longest delay a rule may add, virtual seconds.
        horizon: windows are drawn inside [0, horizon) virtual seconds.

    Raises:
        ValueError: an op simfs cannot fault, or an empty choice.
    """
    chosen = sorted(FAULTABLE_OPS) if ops is None else list(ops)
    bad = [op for op in chosen if op not in FAULTABLE_OPS]
    if bad or not chosen:
        raise ValueError(f"ops {bad or chosen} cannot be faulted; allowed: "
                         f"{', '.join(sorted(FAULTABLE_OPS))}")
    if not paths or not hosts:
        raise ValueError("fault_rules needs at least one path and one host (None: any)")
    if max_nth < 1:
        raise ValueError(f"max_nth must be >= 1, not {max_nth!r}")

    @st.composite
    def rule(draw: st.DrawFn) -> FaultRule:
        op = draw(st.sampled_from(chosen))
        path = draw(st.sampled_from(list(paths)))
        host = draw(st.sampled_from(list(hosts)))
        kind = draw(st.sampled_from(("errno", "delay", "both")))
        code = (draw(st.sampled_from(ERRNOS_BY_OP.get(op, (errno.EIO,))))
                if kind != "delay" else None)
        delay = draw(delays(max_delay).filter(bool)) if kind != "errno" else 0.0
        when = draw(st.sampled_from(("nth", "window", "always")))
        nth = draw(st.integers(1, max_nth)) if when == "nth" else None
        window = None
        if when == "window":
            start = draw(delays(horizon))
            window = (start, start + draw(delays(horizon).filter(bool)))
        return FaultRule(op, path, code, delay, host, nth, window)

    return rule()


def host_crashes(hosts: Sequence[str], *, horizon: float = 60.0) -> SearchStrategy[HostCrash]:
    """One host crashing at a time in [0, horizon]; shrinks to the first host at 0."""
    if not hosts:
        raise ValueError("host_crashes needs at least one host name")
    return st.builds(HostCrash, st.sampled_from(list(hosts)), delays(horizon))


def fault_plans(*, ops: Sequence[str] | None = None, paths: Sequence[str] = ("/shared/*",),
                hosts: Sequence[str] = (), max_rules: int = 3, max_close_delays: int = 2,
                max_close_delay: float = 5.0, crashes: bool = False,
                horizon: float = 60.0) -> SearchStrategy[FaultPlan]:
    """Fault plans of errnos and delays per op, late closes and host crashes.

    Shrinks to ``FaultPlan()``: nothing goes wrong.

    Args:
        ops, paths: as for ``fault_rules``.
        hosts: host names rules may be limited to, and (with ``crashes``)
            that may crash; rules always may apply to every host.
        max_rules, max_close_delays: the most of each in one plan.
        max_close_delay: the latest a close may land, virtual seconds.
        crashes: whether one host of ``hosts`` may crash.
        horizon: virtual seconds over which windows and crashes fall.

    Raises:
        ValueError: crashes asked for without hosts, or a bad ``fault_rules``
            argument.
    """
    if crashes and not hosts:
        raise ValueError("fault_plans(crashes=True) needs the host names that may crash")
    scope: list[str | None] = [None, *hosts]
    rules = st.lists(fault_rules(ops, paths=paths, hosts=scope, horizon=horizon),
                     max_size=max_rules).map(tuple)
    late = st.lists(close_delays(paths, hosts=scope, max_seconds=max_close_delay),
                    max_size=max_close_delays).map(tuple)
    crash = (st.lists(host_crashes(hosts, horizon=horizon), max_size=1).map(tuple) if crashes
             else st.just(()))
    return st.builds(FaultPlan, rules, late, crash)
