"""The simfs pytest plugin: a ``world`` fixture, seeds, replays, failure reports.

Installed with the package (entry point ``pytest11``), so a team's suite gets
it without a conftest.  A failing test that used a world gets a report
section (``simfs._failure``): the failed process, its host and mount, its
trace events up to the failure, ``explain()`` for its path, the seed and
one command line that replays it; simfs's own frames are hidden from the
traceback (``--simfs-full-trace`` shows them and every event).  The plugin
is only loaded by pytest; ``import simfs`` never imports pytest.
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from ._failure import describe, replay_line
from ._replay import CURRENT_TEST, CallRecord, ReplayTokenError, decode_token, token_test
from ._world import World

_RECORD = pytest.StashKey[CallRecord]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simfs", "simfs: deterministic NFS simulation")
    group.addoption("--simfs-seed", type=int, default=None, metavar="SEED",
                    help="seed of every `world` fixture (default: derived from the test id)")
    group.addoption("--simfs-full-trace", action="store_true", default=False,
                    help="failure reports list every trace event and show simfs's own "
                         "frames in tracebacks")
    group.addoption("--simfs-replay", default=None, metavar="TOKEN",
                    help="rebuild the world of a reported failure from its replay token "
                         "and run the test it belongs to once on it (other tests run as "
                         "usual)")


def pytest_configure(config: pytest.Config) -> None:
    token = config.getoption("--simfs-replay")
    if token is not None:
        try:
            decode_token(token)
        except ReplayTokenError as error:
            raise pytest.UsageError(f"--simfs-replay: {error}") from None
    seed = config.getoption("--simfs-seed")
    if seed is not None and seed < 0:
        raise pytest.UsageError(f"--simfs-seed {seed}: allowed: an int >= 0")


def pytest_plugin_registered(plugin: object) -> None:
    """Before pytester's first in-process run, import what simfs's routes are made of.

    An in-process pytester run forgets the modules it imported, and simfs's
    routes must not be imported twice (``simfs._patch.preload`` says why).
    pytester may come with ``-p pytester`` or a test module's
    ``pytest_plugins``, so this hook, not ``pytest_configure``.
    """
    if getattr(plugin, "__name__", None) == "_pytest.pytester":
        from ._patch import preload

        preload()


def pytest_collection_finish(session: pytest.Session) -> None:
    """A replay token whose test this session will not run is refused, naming that test."""
    token = session.config.getoption("--simfs-replay")
    if token is None:
        return
    owner = token_test(token)
    if owner is not None and all(item.nodeid != owner for item in session.items):
        raise pytest.UsageError(
            f"--simfs-replay: the token belongs to {owner}, which this session does not "
            f"run; run: pytest {shlex.quote(owner)} --simfs-replay {token}")


def seed_for(nodeid: str) -> int:
    """A stable seed from a test id: the same test gets the same world everywhere.

    sha256, not ``hash()``: string hashes change with PYTHONHASHSEED.
    """
    return int.from_bytes(hashlib.sha256(nodeid.encode()).digest()[:4], "big")


def _record(item: pytest.Item) -> CallRecord:
    record = item.stash.get(_RECORD, None)
    if record is None:
        token = item.config.getoption("--simfs-replay")
        # A token applies to the test it names (one made outside pytest, to
        # any explored test: its hosts are checked against the test's).
        if token is not None and token_test(token) not in (None, item.nodeid):
            token = None
        record = CallRecord(replay=token, nodeid=item.nodeid,
                            seed=item.config.getoption("--simfs-seed"),
                            full_trace=item.config.getoption("--simfs-full-trace"))
        item.stash[_RECORD] = record
    return record


@pytest.fixture
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    """A fresh ``simfs.World`` for this test, closed after it.

    Its seed is ``--simfs-seed`` if given, else derived from the test's node
    id (a failure's report names the seed to replay it with).  It has no
    hosts: the test adds them with ``world.host()``, so what it does to
    ``world.server`` before that is older than every mount (replay tokens
    are for ``explore``'s worlds, never this fixture's).
    """
    record = _record(request.node)
    made = World(seed_for(request.node.nodeid) if record.seed is None else record.seed)
    record.worlds.append((made, ""))
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
    record = item.stash.get(_RECORD, None)
    ours = record is not None and call.when == "call" and call.excinfo is not None \
        and bool(record.worlds)
    hidden = _hide_simfs_frames(call.excinfo.value if call.excinfo else None) \
        if ours and not item.config.getoption("--simfs-full-trace") else []
    try:
        report = yield
    finally:
        for namespace in hidden:
            namespace.pop("__tracebackhide__", None)
    if ours and report.failed and record is not None:
        report.sections.append(("simfs", _section(item.nodeid, record, call)))
    return report


def _hide_simfs_frames(error: BaseException | None) -> list[dict[str, Any]]:
    """Mark simfs's frames hidden while pytest formats the failure.

    pytest drops a frame whose globals hold ``__tracebackhide__``: every
    loaded simfs module is marked, and the signature proxy Hypothesis puts
    around ``explore``'s example (its globals say
    ``__hypothesistracebackhide__``).  Returns the namespaces marked, to
    unmark after; ``--simfs-full-trace`` shows them all.
    """
    namespaces = [vars(module) for name, module in sys.modules.copy().items()
                  if module is not None and (name == "simfs" or name.startswith("simfs."))]
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        tb = error.__traceback__
        while tb is not None:
            if tb.tb_frame.f_globals.get("__hypothesistracebackhide__"):
                namespaces.append(tb.tb_frame.f_globals)
            tb = tb.tb_next
        error = error.__cause__ or error.__context__
    marked = []
    for namespace in namespaces:
        if "__tracebackhide__" not in namespace:
            namespace["__tracebackhide__"] = True
            marked.append(namespace)
    return marked


def _section(nodeid: str, record: CallRecord, call: pytest.CallInfo[None]) -> str:
    world, token = record.worlds[-1]
    if token and record.report is not None:
        return record.report  # explore wrote it before the world closed
    error = call.excinfo.value if call.excinfo is not None else None
    return describe(world, error, replay_line(nodeid, world, token), full=record.full_trace)

