"""Fault plans: what goes wrong, where and when, as data.

A plan is a frozen value: it prints as code that builds it again
(``repr``), it can be stored with a failing seed, and Hypothesis can shrink
the rules list like any other.  Three kinds of rule:

- ``FaultRule``: a syscall on a host and path fails with an errno, or is
  delayed, on its n-th matching call, inside a time window, or always.
- ``CloseDelay``: the close of a matching file lands later than the process
  called it (async saves, writeback): the removal window of docs/design.md,
  "The NFS model" in which ``rmtree`` meets ENOTEMPTY, EBUSY and ENOENT.
- ``HostCrash``: a host stops at a time; its processes stop, its open files
  stay behind as ``.nfs`` orphans, its unflushed writes are lost.
"""

from __future__ import annotations

import errno as errno_module
import fnmatch
import math
import re
from dataclasses import dataclass, field
from typing import Final

from .._errors import FaultPlanError

# The syscalls a rule can name: the ones the syscall layer implements.
FAULTABLE_OPS: Final = frozenset({
    "stat", "open", "read", "write", "close", "fsync", "listdir", "scandir", "mkdir",
    "rmdir", "unlink", "rename", "link", "utime", "ftruncate", "truncate", "fstat",
    "lseek", "chmod", "chown", "access", "flock", "lockf", "statvfs",
})


def _check_time(value: float, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FaultPlanError(f"{what} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise FaultPlanError(f"{what} must be a finite number of seconds >= 0, not {value!r}")


def _check_pattern(path: str) -> None:
    if not isinstance(path, str) or not path.startswith("/"):
        raise FaultPlanError(
            f"path pattern {path!r} must be an absolute glob under the export, "
            "e.g. '/shared/ckpt/*'")


def _errno_repr(code: int) -> str:
    name = errno_module.errorcode.get(code)
    return f"errno.{name}" if name else str(code)


@dataclass(frozen=True, slots=True)
class FaultRule:
    """A syscall fails with ``errno``, or waits ``delay`` seconds first.

    Args:
        op: the syscall name, one of ``FAULTABLE_OPS``.
        path: a glob (fnmatch) the call's path must match.
        errno: the error to raise; omit it for a pure delay.
        delay: virtual seconds the call takes before its effect.
        host: the host name, or None for every host.
        nth: fire on the n-th matching call only (1-based).
        window: fire only for calls at virtual times in [start, end).

    Raises:
        FaultPlanError: an unknown op or errno, a relative path, a rule that
            does nothing, or both ``nth`` and ``window``.
    """

    op: str
    path: str = "/*"
    errno: int | None = None
    delay: float = 0.0
    host: str | None = None
    nth: int | None = None
    window: tuple[float, float] | None = None
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.op not in FAULTABLE_OPS:
            raise FaultPlanError(
                f"unknown op {self.op!r}; allowed: {', '.join(sorted(FAULTABLE_OPS))}")
        _check_pattern(self.path)
        if self.errno is not None and self.errno not in errno_module.errorcode:
            raise FaultPlanError(
                f"unknown errno {self.errno!r}; use a constant of the errno module")
        _check_time(self.delay, "delay")
        if self.errno is None and self.delay == 0:
            raise FaultPlanError("a FaultRule needs an errno, a delay, or both")
        if self.nth is not None and (isinstance(self.nth, bool) or not isinstance(self.nth, int)
                                     or self.nth < 1):
            raise FaultPlanError(f"nth must be an int >= 1, not {self.nth!r}")
        if self.window is not None:
            if self.nth is not None:
                raise FaultPlanError("give nth or window, not both")
            start, end = self.window
            _check_time(start, "window start")
            _check_time(end, "window end")
            if not start < end:
                raise FaultPlanError(f"window {self.window!r} must have start < end")
        object.__setattr__(self, "_regex", re.compile(fnmatch.translate(self.path)))

    def matches(self, host: str, path: str) -> bool:
        """Whether this applies to ``path`` on ``host`` (``path`` is a glob)."""
        return (self.host is None or self.host == host) and bool(self._regex.match(path))

    def __repr__(self) -> str:
        parts = [f"op={self.op!r}", f"path={self.path!r}"]
        if self.errno is not None:
            parts.append(f"errno={_errno_repr(self.errno)}")
        if self.delay:
            parts.append(f"delay={self.delay!r}")
        if self.host is not None:
            parts.append(f"host={self.host!r}")
        if self.nth is not None:
            parts.append(f"nth={self.nth!r}")
        if self.window is not None:
            parts.append(f"window={self.window!r}")
        return f"FaultRule({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class CloseDelay:
    """The close of a file matching ``path`` takes effect ``seconds`` later."""

    path: str
    seconds: float
    host: str | None = None
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_pattern(self.path)
        _check_time(self.seconds, "seconds")
        object.__setattr__(self, "_regex", re.compile(fnmatch.translate(self.path)))

    def matches(self, host: str, path: str) -> bool:
        """Whether this applies to ``path`` on ``host`` (``path`` is a glob)."""
        return (self.host is None or self.host == host) and bool(self._regex.match(path))

    def __repr__(self) -> str:
        host = "" if self.host is None else f", host={self.host!r}"
        return f"CloseDelay(path={self.path!r}, seconds={self.seconds!r}{host})"


@dataclass(frozen=True, slots=True)
class HostCrash:
    """Host ``host`` crashes at virtual time ``at``."""

    host: str
    at: float

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise FaultPlanError(f"host must be a host name, not {self.host!r}")
        _check_time(self.at, "at")


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """Everything that goes wrong in one run."""

    rules: tuple[FaultRule, ...] = ()
    close_delays: tuple[CloseDelay, ...] = ()
    crashes: tuple[HostCrash, ...] = ()

    def __post_init__(self) -> None:
        for name, kind in (("rules", FaultRule), ("close_delays", CloseDelay),
                           ("crashes", HostCrash)):
            items = tuple(getattr(self, name))
            for item in items:
                if not isinstance(item, kind):
                    raise FaultPlanError(f"{name} holds {item!r}, which is not a {kind.__name__}")
            object.__setattr__(self, name, items)

    def hosts(self) -> set[str]:
        """Every host the plan names, so the world can refuse unknown ones."""
        named = {rule.host for rule in self.rules if rule.host}
        named |= {delay.host for delay in self.close_delays if delay.host}
        return named | {crash.host for crash in self.crashes}

    def __repr__(self) -> str:
        parts = []
        for name in ("rules", "close_delays", "crashes"):
            items = getattr(self, name)
            if items:
                inner = ", ".join(repr(item) for item in items)
                parts.append(f"{name}=({inner},)")
        return f"FaultPlan({', '.join(parts)})"


class FaultState:
    """A plan in use: counts matching calls so ``nth`` can fire once."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self._by_op: dict[str, list[FaultRule]] = {}
        for rule in plan.rules:
            self._by_op.setdefault(rule.op, []).append(rule)
        self._counts: dict[tuple[str, int], int] = {}

    def for_call(self, op: str, host: str, path: str, now: float) -> FaultRule | None:
        """The first rule that fires for this call, counting it against ``nth``."""
        rules = self._by_op.get(op)
        if not rules:
            return None
        fired = None
        for index, rule in enumerate(rules):
            if not rule.matches(host, path):
                continue
            if rule.window is not None:
                if fired is None and rule.window[0] <= now < rule.window[1]:
                    fired = rule
                continue
            if rule.nth is not None:
                key = (op, index)
                count = self._counts.get(key, 0) + 1
                self._counts[key] = count
                if fired is None and count == rule.nth:
                    fired = rule
                continue
            if fired is None:
                fired = rule
        return fired

    def close_delay(self, host: str, path: str) -> float:
        for delay in self.plan.close_delays:
            if delay.matches(host, path):
                return delay.seconds
        return 0.0
