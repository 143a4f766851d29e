"""The failure report: what a person needs to see about a failed run, in one screen.

A failing test that used a world gets one section (the pytest plugin adds
it; ``explore`` writes it before the world closes, while its descriptors,
silly renames and caches are still as the failure left them): the process
that failed, its host and mount, what it raised, that process's trace
events up to the failing instant (a poll loop folded to one line), what
other hosts changed near the path meanwhile, ``explain()`` for the path
(for ENOTEMPTY: the ``.nfsXXXX`` names in the directory and the host that
holds each open), the seed and the line that replays it.

No pytest here: the plugin formats, ``explore`` calls it without pytest's help.
"""

from __future__ import annotations

import errno
import posixpath
import shlex
from dataclasses import dataclass

from ._engine._trace import TraceEvent
from ._errors import ProcessFailed
from ._world import World

PROCESS_LINES = 8  # the failing process's last (folded) events
OTHER_LINES = 5  # other hosts' changes near the path
TAIL_LINES = 10  # the trace's tail when no process failed (an assertion in the test)
_READS = frozenset({"stat", "lstat", "exists", "access", "sleep", "read", "listdir", "scandir",
                    "readlink", "getcwd", "fstat", "exit"})


@dataclass(frozen=True)
class Culprit:
    """The process a report is about: its name, host and what it raised."""

    process: str
    host: str
    error: BaseException


def culprit_of(world: World, error: BaseException | None) -> Culprit | None:
    """The failed process behind ``error`` (a ``ProcessFailed``), else the world's first."""
    if isinstance(error, ProcessFailed) and error.failures:
        name, host, raised = error.failures[0]
        return Culprit(name, host, raised)
    for process in world.processes:
        failure = process.exception() if process.done else None
        if failure is not None and type(failure).__name__ not in ("HostCrashed",
                                                                 "ProcessNotFinished"):
            return Culprit(process.name, process.host.name, failure)
    return None


def _path_of(world: World, culprit: Culprit, events: list[TraceEvent]) -> str | None:
    """The path the failure is about: the error's, else the process's last one."""
    export = world.export
    candidates: list[object] = []
    if isinstance(culprit.error, OSError):
        candidates.append(culprit.error.filename)
    candidates.extend(culprit.error.args[:1])
    candidates.extend(event.path for event in reversed(events) if event.path)
    for candidate in candidates:
        if isinstance(candidate, str):
            path = posixpath.normpath(candidate.split(" ")[0])
            if path == export or path.startswith(export + "/"):
                return path
    return None


def _fold(events: list[TraceEvent]) -> list[str]:
    """Events as lines, sleeps dropped and a run of equal calls folded to one."""
    lines: list[str] = []
    last_key: tuple[str, str, str] | None = None
    count = 0
    first: TraceEvent | None = None
    previous: TraceEvent | None = None

    def flush() -> None:
        if first is None or previous is None:
            return
        if count == 1:
            lines.append(first.format())
        else:
            lines.append(f"{first.format()}   (x{count}, the same until {previous.time:.6f}s)")

    for event in events:
        if event.op == "sleep":
            continue
        key = (event.op, event.path, event.outcome)
        if key == last_key:
            count += 1
            previous = event
            continue
        flush()
        last_key, count, first, previous = key, 1, event, event
    flush()
    return lines


def _holders(world: World, directory: str) -> list[str]:
    """For a directory: each ``.nfs`` entry on the server and the host holding it open."""
    try:
        names = world.server.listdir(directory)
        fileid = world.server.stat(directory).fileid
    except OSError:
        return []
    lines = []
    for name in sorted(names):
        if not name.startswith(".nfs"):
            continue
        holders = [host.name for host in world.hosts.values()
                   if any((fileid, name) in entries for entries in host.client.silly.values())]
        held = (f"held open on host {', '.join(repr(h) for h in holders)} (silly-renamed "
                "when it unlinked a file still open; removed when that host closes it)"
                if holders else "no host holds it open any more")
        lines.append(f"  {posixpath.join(directory, name)}: {held}")
    return lines


def describe(world: World, error: BaseException | None, replay: str,
             *, full: bool = False) -> str:
    """The report section for a failure of ``world``; ``replay`` is the line that reruns it.

    ``full`` adds every kept trace event at the end.
    """
    culprit = culprit_of(world, error)
    hosts = "; ".join(f"{name} {host.mount!r}{' (crashed)' if host.crashed else ''}"
                      for name, host in world.hosts.items())
    lines: list[str] = []
    if culprit is None:
        lines.append(f"no simulated process failed; the test itself did, at "
                     f"{world.now:.6f} s (virtual)")
    else:
        host = world.hosts.get(culprit.host)
        mount = f"mount {host.mount!r}, kernel {host.kernel.release}" if host else ""
        lines.append(f"failed: process {culprit.process!r} on host {culprit.host!r} ({mount})")
        lines.append(f"  {_outcome(culprit.error)}")
    lines.append(f"seed {world.seed}; hosts: {hosts}"
                 + (f"; faults: {world.plan!r}" if world.plan.rules or world.plan.close_delays
                    or world.plan.crashes else ""))
    if culprit is None:
        tail = world.trace.format(limit=TAIL_LINES)
        lines.append(f"the trace's last {TAIL_LINES} events:" if tail else "trace: empty")
        lines.extend("  " + line for line in tail.splitlines())
    else:
        own = world.trace.select(host=culprit.host, process=culprit.process)
        at = own[-1].time if own else world.now
        folded = _fold(own)
        shown = folded[-PROCESS_LINES:]
        lines.append(f"{culprit.process!r} on {culprit.host}, up to {at:.6f} s"
                     + (f" (last {len(shown)} of {len(folded)} lines)"
                        if len(shown) < len(folded) else "") + ":")
        lines.extend("  " + line for line in shown)
        path = _path_of(world, culprit, own)
        if path is not None:
            lines.extend(_context(world, culprit, path, at))
    lines.append(f"replay: {replay}")
    if full:
        lines.append(f"full trace ({len(world.trace)} events):")
        lines.extend("  " + line for line in world.trace.format().splitlines())
    else:
        lines.append("(every trace event: --simfs-full-trace)")
    return "\n".join(lines)


def _context(world: World, culprit: Culprit, path: str, at: float) -> list[str]:
    """Other hosts' changes near ``path`` before ``at``, and ``explain`` for it then."""
    lines: list[str] = []
    near = posixpath.dirname(path)
    changes = [event for event in world.trace
               if event.host != culprit.host and event.time <= at and event.op not in _READS
               and event.path and (event.path == near or event.path.startswith(near + "/"))
               and not event.outcome[:1].isupper()]
    if changes:
        lines.append(f"what other hosts changed in {near} before then:")
        lines.extend("  " + event.format() for event in changes[-OTHER_LINES:])
    kept = world._failure_context.get((culprit.host, culprit.process))
    lines.extend(kept if kept is not None else _explained(world, path, culprit.error))
    return lines


def _explained(world: World, path: str, error: BaseException) -> list[str]:
    """``explain(path)`` now, and for ENOTEMPTY who holds the directory's ``.nfs`` files."""
    lines = world.explain(path).splitlines()
    if isinstance(error, OSError) and error.errno == errno.ENOTEMPTY:
        lines.extend(_holders(world, path))
    return lines


def snapshot(world: World, host: str, process: str, error: BaseException) -> list[str]:
    """What the report will say about the path of a failure, taken as the process exits.

    Called by ``World`` for a process that ended with an exception; the
    report is made later, after the run, when the caches and the export may
    have moved on.
    """
    own = world.trace.select(host=host, process=process)
    path = _path_of(world, Culprit(process, host, error), own)
    return [] if path is None else _explained(world, path, error)


def _outcome(error: BaseException) -> str:
    if isinstance(error, SystemExit):
        return f"exited with status {error.code!r} (sys.exit)"
    return f"{type(error).__name__}: {error}"


def replay_line(nodeid: str, world: World, token: str = "") -> str:
    """The command that reruns a failure: a token for explore's worlds, else the seed."""
    how = f"--simfs-replay {token}" if token else f"--simfs-seed {world.seed}"
    return f"pytest {shlex.quote(nodeid)} {how}"
