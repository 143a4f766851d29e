"""Belief timelines: what each host believed about a path, interval by interval.

An NFS stall is a story of who believed what, until when, and why: host B
answered "absent" from a negative dentry for 29 s while the server held the
file.  ``World.explain`` tells that story at one instant; a ``BeliefRecorder``
keeps it for a whole run.  After every traced syscall it asks the acting
host's ``Host.belief(path)`` (caches only, no RPC) and the server's truth for
each watched path, and keeps intervals of present / absent / unknown with the
rule that justified each.  A cached answer also ends on its own when the
attributes that keep it trusted expire (``Belief.until``), with no syscall to
mark it; the recorder closes such an interval at its ``until`` and shows the
host as "unknown" (its next lookup would ask the server) from then on.

Only ``Host.belief`` is used, so the timeline follows whatever rules the
client model applies.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._engine._clock import NS_PER_S
from .._engine._trace import TraceEvent

if TYPE_CHECKING:
    from .._world import World

SERVER = "server"


@dataclass(frozen=True)
class Interval:
    """One stretch of one belief: ``believes`` from ``start`` to ``end`` seconds."""

    start: float
    end: float
    believes: str
    because: str


@dataclass(frozen=True)
class Stall:
    """A host trusted a cached answer that the server contradicted."""

    host: str
    path: str
    start: float
    end: float
    believes: str
    truth: str
    because: str

    def format(self) -> str:
        """One line: who, how long, what it believed against what, and why."""
        return (f"{self.host} believed {self.path} {self.believes} while the server said "
                f"{self.truth} for {self.end - self.start:.3f} s ({self.start:.3f}-"
                f"{self.end:.3f} s): {self.because}")


@dataclass
class Lane:
    """The intervals of one host's belief (or the server's truth) about one path."""

    host: str
    path: str
    intervals: list[Interval] = field(default_factory=list)


@dataclass
class Timeline:
    """Every watched path's lanes, the server's truth first, and the run's events."""

    end: float
    paths: list[str]
    hosts: list[str]
    lanes: dict[tuple[str, str], Lane]
    events: list[TraceEvent]

    def lane(self, host: str, path: str) -> Lane:
        """The lane of ``host`` (or ``"server"``) for ``path``.

        Raises:
            KeyError: the path was not watched or the host is unknown.
        """
        return self.lanes[(host, path)]

    def stalls(self) -> list[Stall]:
        """Every stretch where a host's cached belief contradicted the server."""
        found: list[Stall] = []
        for path in self.paths:
            truth = self.lane(SERVER, path).intervals
            for host in self.hosts:
                for belief in self.lane(host, path).intervals:
                    if belief.believes not in ("present", "absent"):
                        continue
                    for fact in truth:
                        start, end = max(belief.start, fact.start), min(belief.end, fact.end)
                        if end > start and fact.believes != belief.believes:
                            found.append(Stall(host, path, start, end, belief.believes,
                                               fact.believes, belief.because))
        return sorted(found, key=lambda stall: (stall.start, stall.host, stall.path))

    def format(self) -> str:
        """A plain-text rendering for terminals: each lane's intervals, then the stalls."""
        lines: list[str] = []
        for path in self.paths:
            lines.append(f"{path} (0.000-{self.end:.3f} s)")
            for host in [SERVER, *self.hosts]:
                lines.append(f"  {host}:")
                for interval in self.lane(host, path).intervals:
                    because = "" if host == SERVER else f"  ({interval.because})"
                    lines.append(f"    {interval.start:9.3f}-{interval.end:9.3f} s  "
                                 f"{interval.believes:<8}{because}".rstrip())
        stalls = self.stalls()
        lines.append(f"{len(stalls)} stall(s)" + (":" if stalls else ""))
        lines.extend("  " + stall.format() for stall in stalls)
        return "\n".join(lines)


class _Open:
    """The interval still being recorded in one lane."""

    __slots__ = ("because", "believes", "start", "until")

    def __init__(self, start: float, believes: str, because: str, until: float | None) -> None:
        self.start = start
        self.believes = believes
        self.because = because
        self.until = until


class BeliefRecorder:
    """Records belief timelines of a world's hosts while it runs.

    Attach it before ``World.run()``; read ``timeline()`` after.

    Args:
        world: the world to watch; its hosts may be added later.
        paths: absolute paths under the export to watch, updated after every
            syscall that could bear on them; or None to watch every path a
            syscall names, from its first touch on, each updated when a
            syscall names it (and when its cached answer expires).
    """

    def __init__(self, world: World, paths: Iterable[str] | None = None) -> None:
        self._world = world
        self._every_path = paths is None
        self._paths: list[str] = []
        self._watched: set[str] = set()
        self._lanes: dict[tuple[str, str], list[Interval]] = {}
        self._open: dict[tuple[str, str], _Open] = {}
        for path in paths or ():
            self._watch(posixpath.normpath(path))
        record = world.trace.record
        # The events the timeline lists, kept here: the world's trace keeps
        # only its latest events by default (World(trace_keep=...)).
        self._events: list[TraceEvent] = list(world.trace)
        events = self._events

        def record_then_sample(time_ns: int, host: str, process: str, op: str, path: str,
                               outcome: str, rpcs: tuple[str, ...] = ()) -> None:
            record(time_ns, host, process, op, path, outcome, rpcs)
            events.append(TraceEvent(time_ns, host, process, op, path, outcome, rpcs))
            self._sample(time_ns / NS_PER_S, host, path)

        # The trace is the one place every syscall reports to: listen there.
        setattr(world.trace, "record", record_then_sample)  # noqa: B010

    def _watch(self, path: str) -> None:
        export = self._world.export
        if path != export and not path.startswith(export + "/"):
            raise ValueError(f"path {path!r} is outside the export {export!r}")
        if path not in self._watched:
            self._watched.add(path)
            self._paths.append(path)

    def _sample(self, now: float, acting: str, shown: str) -> None:
        export = self._world.export
        touched = [posixpath.normpath(part) for part in shown.split(" -> ")
                   if part == export or part.startswith(export + "/")]
        if self._every_path:
            for path in touched:
                self._watch(path)
        hosts = self._world.hosts
        # Watching every path, a lane is updated when a syscall names its
        # path (and when its cached answer expires): cheap enough for runs
        # that touch thousands of paths.  Watching chosen paths, every
        # syscall that could bear on them updates them.
        candidates = ([path for path in touched if path in self._watched]
                      if self._every_path and touched else self._paths)
        for path in candidates:
            # One syscall changes the server and the acting host's caches only
            # along the paths it walked: a path whose directory it did not
            # pass through keeps its belief.  A pathless event (a crash) may
            # change anything.
            if touched and not any(_bears_on(part, path) for part in touched):
                continue
            truth = "present" if self._world.server.exists(path) else "absent"
            self._update((SERVER, path), now, truth, "the server's namespace", None)
            # Only the acting host's caches changed; the others' may only expire.
            for name in ([acting] if acting in hosts else []):
                belief = hosts[name].belief(path)
                self._update((name, path), now, belief.believes, belief.because, belief.until)

    def _update(self, key: tuple[str, str], now: float, believes: str, because: str,
                until: float | None) -> None:
        current = self._expire(key, now)
        if current is not None and (current.believes, current.because) == (believes, because):
            current.until = until
            return
        self._close(key, now)
        self._open[key] = _Open(now, believes, because, until)

    def _expire(self, key: tuple[str, str], now: float) -> _Open | None:
        """Close a cached answer whose ``until`` passed before ``now``; the open interval."""
        current = self._open.get(key)
        if current is None or current.until is None or current.until >= now:
            return current
        expired_at = current.until
        self._close(key, expired_at)
        self._open[key] = _Open(expired_at, "unknown", "the cached answer expired at "
                                f"{expired_at:.3f} s; the next lookup asks the server", None)
        return self._open[key]

    def _close(self, key: tuple[str, str], at: float) -> None:
        current = self._open.pop(key, None)
        if current is not None and at > current.start:
            self._lanes.setdefault(key, []).append(
                Interval(current.start, at, current.believes, current.because))

    def timeline(self) -> Timeline:
        """The timelines so far, from 0 to the world's current time.

        A lane with no sample before a time shows "unknown" (nothing cached:
        a host that never looked has no belief).
        """
        end = self._world.now
        hosts = list(self._world.hosts)
        lanes: dict[tuple[str, str], Lane] = {}
        for path in self._paths:
            for host in [SERVER, *hosts]:
                key = (host, path)
                done = list(self._lanes.get(key, []))
                current = self._open.get(key)
                if current is not None and current.until is not None and current.until < end:
                    done.append(Interval(current.start, current.until, current.believes,
                                         current.because))
                    current = _Open(current.until, "unknown", "the cached answer expired at "
                                    f"{current.until:.3f} s", None)
                if current is not None and end > current.start:
                    done.append(Interval(current.start, end, current.believes,
                                         current.because))
                first = done[0].start if done else end
                if first > 0:
                    done.insert(0, Interval(0.0, first, "unknown", "nothing recorded yet"))
                lanes[key] = Lane(host, path, done)
        events = [event for event in self._events
                  if any(_related(event.path, path) for path in self._paths)]
        return Timeline(end, list(self._paths), hosts, lanes, events)


def _bears_on(touched: str, watched: str) -> bool:
    """Whether a syscall on ``touched`` can change a cached belief about ``watched``.

    It can if it touched ``watched`` itself, a directory above it (removal,
    rename, revalidation), or walked through ``watched``'s directory, whose
    attributes keep the entry for ``watched`` trusted.
    """
    parent = posixpath.dirname(watched)
    return (touched in (watched, parent) or watched.startswith(touched + "/")
            or touched.startswith(parent + "/"))


def _related(touched: str, watched: str) -> bool:
    """Whether a syscall on ``touched`` can bear on a belief about ``watched``."""
    return bool(touched) and (touched == watched or watched.startswith(touched + "/")
                              or touched.startswith(watched + "/"))


def watch_paths_with_stalls(timeline: Timeline, limit: int) -> Sequence[str]:
    """The paths worth drawing: those with stalls first, at most ``limit`` of them."""
    stalled = list(dict.fromkeys(stall.path for stall in timeline.stalls()))
    rest = [path for path in timeline.paths if path not in stalled]
    return (stalled + rest)[:limit]
