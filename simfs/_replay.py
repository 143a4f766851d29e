"""Replay tokens: one printable line that rebuilds a world exactly as a run had it.

A failing exploration is only useful if another person, on another machine,
can run the same thing again.  A token carries what a world is made of (its
seed, export, hosts and their nfs(5) options, the fault plan, its environment
and time zone) and every scheduling choice the run made; rebuilt from it, the
world replays the recorded choices (``World(chooser=[...])``) and so the
identical trace.
Tokens hold plain JSON (never pickles): decoding one runs no code.

No Hypothesis and no pytest here: ``import simfs`` stays cheap, and a replay
needs neither.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ._nfs._faults import CloseDelay, FaultPlan, FaultRule, HostCrash
from ._os._machine import DEFAULT_ZONE
from ._world import World

PREFIX = "simfs1-"


class ReplayTokenError(ValueError):
    """A replay token that cannot be read: truncated, edited, or from elsewhere."""


def encode_token(payload: Mapping[str, Any]) -> str:
    """``payload`` (plain JSON values) as one copy-pasteable word."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    packed = base64.urlsafe_b64encode(zlib.compress(text.encode(), 9)).decode().rstrip("=")
    return PREFIX + packed


def decode_token(token: str) -> dict[str, Any]:
    """The payload of a token made by ``encode_token``.

    Raises:
        ReplayTokenError: naming the token and what is wrong with it.
    """
    if not isinstance(token, str) or not token.startswith(PREFIX):
        raise ReplayTokenError(f"replay token {token!r} does not start with {PREFIX!r}; "
                               "copy the whole token from the failure report")
    body = token[len(PREFIX):]
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        payload = json.loads(raw)
    except (binascii.Error, zlib.error, ValueError) as error:
        raise ReplayTokenError(f"replay token {token[:40]!r}... is damaged ({error}); copy "
                               "the whole token from the failure report") from None
    if not isinstance(payload, dict):
        raise ReplayTokenError(f"replay token {token[:40]!r}... holds no payload")
    return payload


# -- fault plans as JSON ------------------------------------------------------------------


def plan_to_json(plan: FaultPlan) -> dict[str, Any]:
    """A fault plan as plain JSON values; ``plan_from_json`` inverts it."""
    return {
        "rules": [{"op": r.op, "path": r.path, "errno": r.errno, "delay": r.delay,
                   "host": r.host, "nth": r.nth,
                   "window": None if r.window is None else list(r.window)}
                  for r in plan.rules],
        "close_delays": [{"path": d.path, "seconds": d.seconds, "host": d.host}
                         for d in plan.close_delays],
        "crashes": [{"host": c.host, "at": c.at} for c in plan.crashes],
    }


def plan_from_json(data: Mapping[str, Any]) -> FaultPlan:
    """Raises: FaultPlanError (an invalid rule), KeyError/TypeError (a malformed one)."""
    rules = tuple(FaultRule(rule["op"], rule["path"], rule["errno"], rule["delay"],
                            rule["host"], rule["nth"],
                            None if rule["window"] is None else tuple(rule["window"]))
                  for rule in data.get("rules", ()))
    delays = tuple(CloseDelay(d["path"], d["seconds"], d["host"])
                   for d in data.get("close_delays", ()))
    crashes = tuple(HostCrash(c["host"], c["at"]) for c in data.get("crashes", ()))
    return FaultPlan(rules, delays, crashes)


# -- worlds -------------------------------------------------------------------------------


def world_token(world: World, hosts: Sequence[str] | None = None,
                test: str | None = None) -> str:
    """A token that rebuilds ``world`` (the ``hosts`` named, all if None) and its schedule.

    Hosts the test adds itself after the world is handed to it are left out:
    the test adds them again when it is replayed.  ``test``, a pytest node
    id, names the test the token belongs to: ``--simfs-replay`` applies it
    there only.
    """
    names = list(world.hosts) if hosts is None else list(hosts)
    payload: dict[str, Any] = {
        "kind": "world", "seed": world.seed, "export": world.export,
        "hosts": [[name, world.hosts[name].mount, world.hosts[name].link] for name in names],
        "faults": plan_to_json(world.plan), "rpc_latency_ns": world._rpc_latency_ns,
        "link": world.link,
        "choices": world.choices, "env": dict(world.env), "tz": world.tz,
    }
    if test is not None:
        payload["test"] = test
    return encode_token(payload)


def token_test(token: str) -> str | None:
    """The pytest node id a world token belongs to; None for a token made outside pytest.

    Raises:
        ReplayTokenError: the token is damaged.
    """
    test = decode_token(token).get("test")
    return test if isinstance(test, str) else None


def world_from_token(token: str, *, setup: Callable[[World], object] | None = None,
                     hosts: Sequence[str] | None = None) -> World:
    """A fresh world built from ``world_token``'s token, replaying its choices.

    Args:
        setup: called with the world before any host mounts, as
            ``explore(setup=...)`` does for each example.
        hosts: the host names the replaying test explores; the token must
            hold exactly these.

    Raises:
        ReplayTokenError: the token is damaged, is not a world's, or holds
            other hosts than ``hosts`` (it belongs to another test).
    """
    payload = decode_token(token)
    if payload.get("kind") != "world":
        raise ReplayTokenError(f"replay token {token[:40]!r}... is a "
                               f"{payload.get('kind', 'unknown')!r} token, not a world's")
    recorded = [entry[0] for entry in payload.get("hosts", ()) if isinstance(entry, list)
                and entry]
    if hosts is not None and sorted(recorded) != sorted(hosts):
        owner = payload.get("test")
        raise ReplayTokenError(
            f"replay token {token[:40]!r}... does not fit this test: it holds hosts "
            f"{recorded}, this test explores {list(hosts)}"
            + (f"; it belongs to {owner}" if isinstance(owner, str) else ""))
    # Only reading the token is the token's fault: an error of the test's own
    # setup() or of World() is the test's, and keeps its own type and message.
    try:
        plan = plan_from_json(payload["faults"])
        seed, export, choices = payload["seed"], payload["export"], payload["choices"]
        # env and tz: absent from tokens made before World had them (the defaults).
        env, tz = payload.get("env"), payload.get("tz", DEFAULT_ZONE)
        # link: absent from tokens made before World had it (no link then).
        link = payload.get("link")
        # Set in ns, as recorded: seconds would round up on the way back.
        latency_ns = int(payload["rpc_latency_ns"])
        mounts = [(name, mount, extra[0] if extra else None)
                  for name, mount, *extra in payload["hosts"]]
    except (KeyError, TypeError, ValueError) as error:
        raise ReplayTokenError(f"replay token {token[:40]!r}... lacks {error}") from None
    world = World(seed, export=export, chooser=choices,
                  faults=plan if plan != FaultPlan() else None, env=env, tz=tz, link=link)
    world._rpc_latency_ns = latency_ns
    if setup is not None:
        setup(world)
    for name, mount, host_link in mounts:
        world.host(name, mount=mount, link=host_link)
    return world


# -- the seam between the pytest plugin and simfs.strategies.explore ----------------------


@dataclass
class CallRecord:
    """What the plugin asks of one test's worlds, and what they report back.

    The plugin sets it for the duration of a test call; ``explore`` reads the
    replay token from it and leaves the failing world's token there for the
    failure report.  A ContextVar, not a global: one test's record never
    leaks into the next.
    """

    replay: str | None = None
    worlds: list[tuple[World, str]] = field(default_factory=list)
    nodeid: str | None = None  # the test's pytest node id, written into its tokens
    seed: int | None = None  # --simfs-seed: every explored example's seed
    full_trace: bool = False  # --simfs-full-trace: the report lists every event
    report: str | None = None  # the last failure's report, written before its world closed


CURRENT_TEST: ContextVar[CallRecord | None] = ContextVar("simfs_current_test", default=None)
