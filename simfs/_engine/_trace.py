"""The record of a run: every syscall, sleep and lifecycle event, in order.

Entries are plain tuples while recording (the syscall path is hot) and
become ``TraceEvent``s when read.  ``digest()`` hashes a canonical text
form of every event, so "same seed, same run" is one string comparison;
the hash runs as the trace grows, so a run keeps only its last events
(``World(trace_keep=N)``, by default ``DEFAULT_TRACE_KEEP``) and its memory
stays bounded (issue 16: ~120 B per kept event); ``trace_keep=None`` keeps
every event.
"""

from __future__ import annotations

import hashlib
from collections import deque
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


_Event = tuple[int, str, str, str, str, str, tuple[str, ...]]

# The events a world keeps readable unless told otherwise: far more than a
# failure report or ``explain`` reads around one instant, about 12 MB at
# ~120 B each, so a run of 1,000,000 events peaks near 42 MB (issue 29).
DEFAULT_TRACE_KEEP = 100_000

# Events are folded into the running digest in batches: formatting and
# hashing a batch costs the same as at the end, and none of it is on the
# syscall path.
_FOLD_EVERY = 4096


# How canonical lines become the digest's bytes: a file name need not be
# UTF-8 (Linux and NFS allow any bytes), and a bytes path is shown decoded
# with surrogateescape, as os.fsdecode does; encoding the same way gives
# back its bytes.  Every other text encodes as plain UTF-8.
_ENCODING = ("utf-8", "surrogateescape")


def _canonical_line(event: _Event) -> str:
    t, host, process, op, path, outcome, rpcs = event
    return f"{t}|{host}|{process}|{op}|{path}|{outcome}|{','.join(rpcs)}\n"


class Trace:
    """The events of a run, with a running digest over all of them.

    Args:
        keep: how many of the most recent events to keep for reading
            (``select``, ``format``, iteration); None keeps every event.  The
            digest and ``len()`` always cover the whole run, so a long run can
            keep its memory bounded and still be compared with another.
    """

    def __init__(self, keep: int | None = None) -> None:
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int)
                                 or keep < 0):
            raise ValueError(f"trace keep must be None or an int >= 0, not {keep!r}")
        self._keep = keep
        self._pending: list[_Event] = []
        self._kept: deque[_Event] = deque(maxlen=keep)
        self._hash = hashlib.sha256()
        self._folded = 0

    def record(self, time_ns: int, host: str, process: str, op: str, path: str,
               outcome: str, rpcs: tuple[str, ...] = ()) -> None:
        """Append one event (the world and the syscall layer call this)."""
        pending = self._pending
        pending.append((time_ns, host, process, op, path, outcome, rpcs))
        if len(pending) >= _FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        pending = self._pending
        # _canonical_line, inlined: folding is a fifth of a poll's cost otherwise
        # (and joining an empty tuple is cheaper than testing for one).
        self._hash.update("".join([
            f"{t}|{host}|{process}|{op}|{path}|{outcome}|{','.join(rpcs)}\n"
            for t, host, process, op, path, outcome, rpcs in pending]).encode(*_ENCODING))
        self._folded += len(pending)
        self._kept.extend(pending)
        pending.clear()

    def __len__(self) -> int:
        """Events recorded in the whole run (kept or not)."""
        return self._folded + len(self._pending)

    @property
    def dropped(self) -> int:
        """Events recorded but no longer kept (0 unless ``keep`` was set)."""
        return len(self) - len(self._retained())

    def _retained(self) -> list[_Event]:
        events = list(self._kept)
        events.extend(self._pending)
        if self._keep is not None and len(events) > self._keep:
            events = events[len(events) - self._keep:]
        return events

    def __iter__(self) -> Iterator[TraceEvent]:
        return (TraceEvent(*event) for event in self._retained())

    def __getitem__(self, index: int) -> TraceEvent:
        """The kept event at ``index`` (negative indices count from the last)."""
        pending = self._pending
        newest = len(pending) if self._keep is None else min(len(pending), self._keep)
        if -newest <= index < 0:  # trace[-1] and friends: no copy of the trace
            return TraceEvent(*pending[index])
        return TraceEvent(*self._retained()[index])

    def select(self, *, host: str | None = None, process: str | None = None,
               op: str | None = None, path: str | None = None) -> list[TraceEvent]:
        """The kept events matching every given field."""
        return [event for event in self
                if (host is None or event.host == host)
                and (process is None or event.process == process)
                and (op is None or event.op == op)
                and (path is None or event.path == path)]

    def canonical(self) -> str:
        """One line per kept event, every field exact (times in integer ns)."""
        return "".join(map(_canonical_line, self._retained()))

    def digest(self) -> str:
        """sha256 over every event's canonical line: equal runs have equal digests."""
        running = self._hash.copy()
        running.update("".join(map(_canonical_line, self._pending)).encode(*_ENCODING))
        return running.hexdigest()

    def format(self, limit: int | None = None) -> str:
        """A readable listing, one kept event per line (the last ``limit`` if given).

        A listing that reaches back past the kept events starts with a line
        saying how many earlier ones were not kept, and how to keep them.
        """
        events = self._retained()
        lines = []
        if limit is not None and limit < len(events):
            events = events[-limit:] if limit else []
        elif self.dropped:
            lines.append(f"({self.dropped:,} earlier events not kept: the trace keeps the "
                         f"last {self._keep:,}; World(trace_keep=None) keeps every event)")
        lines.extend(TraceEvent(*event).format() for event in events)
        return "\n".join(lines)
