"""The record of a run: every syscall, sleep and lifecycle event, in order.

Entries are plain tuples while recording (the syscall path is hot) and
become ``TraceEvent``s when read.  ``digest()`` hashes a canonical text
form, so "same seed, same run" is one string comparison.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import NamedTuple

from ._clock import NS_PER_S


class TraceEvent(NamedTuple):
    """One thing that happened: when, where, who, what, on which path, how it ended."""

    time_ns: int
    host: str
    process: str
    op: str
    path: str
    outcome: str
    rpcs: tuple[str, ...]

    @property
    def time(self) -> float:
        """Virtual seconds at which the event happened."""
        return self.time_ns / NS_PER_S

    def format(self) -> str:
        """One line: time, host, process, operation, path, outcome, RPCs."""
        rpcs = f"  [{' '.join(self.rpcs)}]" if self.rpcs else ""
        path = f" {self.path}" if self.path else ""
        return (f"{self.time_ns / NS_PER_S:12.6f}s  {self.host:<8} {self.process:<14} "
                f"{self.op}{path} -> {self.outcome}{rpcs}")


class Trace:
    """An append-only list of trace events."""

    def __init__(self) -> None:
        self._events: list[tuple[int, str, str, str, str, str, tuple[str, ...]]] = []

    def record(self, time_ns: int, host: str, process: str, op: str, path: str,
               outcome: str, rpcs: tuple[str, ...] = ()) -> None:
        """Append one event (the world and the syscall layer call this)."""
        self._events.append((time_ns, host, process, op, path, outcome, rpcs))

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[TraceEvent]:
        return (TraceEvent(*event) for event in self._events)

    def __getitem__(self, index: int) -> TraceEvent:
        return TraceEvent(*self._events[index])

    def select(self, *, host: str | None = None, process: str | None = None,
               op: str | None = None, path: str | None = None) -> list[TraceEvent]:
        """The events matching every given field."""
        return [event for event in self
                if (host is None or event.host == host)
                and (process is None or event.process == process)
                and (op is None or event.op == op)
                and (path is None or event.path == path)]

    def canonical(self) -> str:
        """One line per event, every field exact (times in integer ns)."""
        return "\n".join(
            f"{t}|{host}|{process}|{op}|{path}|{outcome}|{','.join(rpcs)}"
            for t, host, process, op, path, outcome, rpcs in self._events)

    def digest(self) -> str:
        """sha256 of the canonical form: equal runs have equal digests."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    def format(self, limit: int | None = None) -> str:
        """A readable listing, one event per line (the last ``limit`` if given)."""
        events = list(self)
        if limit is not None:
            events = events[-limit:]
        return "\n".join(event.format() for event in events)
