"""The simfs pytest plugin: a ``world`` fixture, seeds, replays, failure reports.

Installed with the package (entry point ``pytest11``), so a team's suite gets
it without a conftest.  A failing test that used a world gets a report
section with what a person needs to rerun it: the seed, each host and its
mount options, the last lines of the trace, and one command line that
replays it.  The plugin is only loaded by pytest; ``import simfs`` never
imports pytest.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from ._replay import CURRENT_TEST, CallRecord, ReplayTokenError, decode_token
from ._replay import world_from_token as _world_from_token
from ._world import World

TRACE_LINES = 20
_RECORD = pytest.StashKey[CallRecord]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simfs", "simfs: deterministic NFS simulation")
    group.addoption("--simfs-seed", type=int, default=None, metavar="SEED",
                    help="seed of every `world` fixture (default: derived from the test id)")
    group.addoption("--simfs-replay", default=None, metavar="TOKEN",
                    help="rebuild the world of a reported failure from its replay token "
                         "and run the test once on it")


def pytest_configure(config: pytest.Config) -> None:
    token = config.getoption("--simfs-replay")
    if token is not None:
        try:
            decode_token(token)
        except ReplayTokenError as error:
            raise pytest.UsageError(f"--simfs-replay: {error}") from None


def seed_for(nodeid: str) -> int:
    """A stable seed from a test id: the same test gets the same world everywhere.

    sha256, not ``hash()``: string hashes change with PYTHONHASHSEED.
    """
    return int.from_bytes(hashlib.sha256(nodeid.encode()).digest()[:4], "big")


def _record(item: pytest.Item) -> CallRecord:
    record = item.stash.get(_RECORD, None)
    if record is None:
        record = CallRecord(replay=item.config.getoption("--simfs-replay"))
        item.stash[_RECORD] = record
    return record


@pytest.fixture
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    """A fresh ``simfs.World`` for this test, closed after it.

    Its seed is ``--simfs-seed`` if given, else derived from the test's node
    id; with ``--simfs-replay TOKEN`` it is the reported world, schedule and
    all.
    """
    record = _record(request.node)
    if record.replay is not None:
        made = _world_from_token(record.replay)
    else:
        seed = request.config.getoption("--simfs-seed")
        made = World(seed_for(request.node.nodeid) if seed is None else seed)
    record.worlds.append((made, "" if record.replay is None else record.replay))
    try:
        yield made
    finally:
        made.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Let ``simfs.strategies.explore`` see the replay token and report its worlds."""
    token = CURRENT_TEST.set(_record(item))
    try:
        return (yield)
    finally:
        CURRENT_TEST.reset(token)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    record = item.stash.get(_RECORD, None)
    if record is not None and report.failed and call.when == "call" and record.worlds:
        world, token = record.worlds[-1]
        report.sections.append(("simfs", describe_failure(item.nodeid, world, token)))
    return report


def describe_failure(nodeid: str, world: World, token: str = "") -> str:
    """The report section: seed, hosts and mounts, the trace's tail, how to replay."""
    lines = [f"seed: {world.seed}   virtual time: {world.now:.6f} s   "
             f"schedule choices: {len(world.choices)}", "hosts:"]
    width = max((len(name) for name in world.hosts), default=4)
    for name, host in world.hosts.items():
        state = "  (crashed)" if host.crashed else ""
        lines.append(f"  {name:<{width}}  mount {host.mount!r}{state}")
    if world.plan.rules or world.plan.close_delays or world.plan.crashes:
        lines.append(f"faults: {world.plan!r}")
    tail = world.trace.format(limit=TRACE_LINES)
    lines.append(f"last {TRACE_LINES} trace events:" if tail else "trace: empty")
    lines.extend("  " + line for line in tail.splitlines())
    # A fixture's world replays from its seed; an explored one from its token.
    how = f"--simfs-replay {token}" if token else f"--simfs-seed {world.seed}"
    lines.append(f"replay: pytest {shlex.quote(nodeid)} {how}")
    return "\n".join(lines)
