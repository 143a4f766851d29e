"""One exploration API for every scenario: what may vary, one example, its replay.

A scenario opts in with one declaration, a class attribute::

    exploration: ClassVar[Exploration] = Exploration(space=_space, run=_example)

``space()`` returns a Hypothesis strategy of JSON-able dicts (what may vary:
timings, mount options, fault plans, sizes); ``run(variant, example, seed,
chooser)`` runs one example in fresh simfs worlds and returns an
``Outcome``: the invariant violations, the trace digest, the virtual seconds
simulated and the schedule it took.  Everything else (the search, shrinking,
budgets, shards, a shared example database, replay tokens) is here, the
same for every scenario.

Hypothesis is imported by the functions that search, never at import time:
``python -m scenarios run`` does not load it.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simfs._replay import decode_token, encode_token

from ._base import Scenario, ScenarioError

Chooser = Callable[[int], int] | Sequence[int]


@dataclass(frozen=True)
class Outcome:
    """What one example did: the violations, its trace digest, its time, its schedule."""

    problems: tuple[str, ...]
    digest: str
    virtual_s: float
    choices: tuple[int, ...]
    # What the example reached (e.g. the window a reload landed in): counted
    # over a search, to show a clean search did reach what it claims to check.
    reached: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exploration:
    """A scenario's declaration of what may vary and how one example runs.

    Args:
        space: builds the strategy of examples (JSON-able dicts); called only
            when a search starts, so Hypothesis is imported then.
        run: ``run(variant, example, seed, chooser) -> Outcome``; ``chooser``
            is a Hypothesis-drawn schedule, or the recorded choices of a
            replay, for ``World(chooser=...)``.
        max_deviations: schedule deviations one example may draw
            (``simfs.strategies.schedules``).
    """

    space: Callable[[], Any]
    run: Callable[[str, dict[str, Any], int, Chooser], Outcome]
    max_deviations: int = 16


def exploration_of(scenario: type[Scenario]) -> Exploration:
    """Raises: ScenarioError, when the scenario declares no exploration."""
    declared = getattr(scenario, "exploration", None)
    if not isinstance(declared, Exploration):
        raise ScenarioError(f"scenario {scenario.name!r} declares nothing to explore; "
                            "give it an `exploration = Exploration(...)` attribute")
    return declared


@dataclass
class Failure:
    """The minimal failing example Hypothesis shrank to, and how to run it again."""

    scenario: str
    variant: str
    example: dict[str, Any]
    seed: int
    outcome: Outcome

    @property
    def token(self) -> str:
        return encode_token({"kind": "scenario", "scenario": self.scenario,
                             "variant": self.variant, "example": self.example,
                             "seed": self.seed, "choices": list(self.outcome.choices)})


@dataclass
class SearchState:
    """Counts while a search runs (the progress line and the summary)."""

    scenario: str
    variant: str
    examples: int = 0
    virtual_s: float = 0.0
    failures: int = 0
    first_failure: int | None = None
    started: float = field(default_factory=time.perf_counter)
    elapsed_s: float = 0.0
    budget_spent: bool = False
    failure: Failure | None = None
    reached: Counter[str] = field(default_factory=Counter)


class ExampleFailed(AssertionError):
    """An example broke the scenario's invariant (raised inside the search)."""


class _BudgetSpent(BaseException):
    """Stops a search whose wall-clock budget ran out before it found anything.

    A BaseException, so Hypothesis lets it through instead of shrinking it.
    """


def shard_seed(seed: int, shard: int, shards: int) -> int:
    """The Hypothesis seed of shard ``shard`` of ``shards``: disjoint, reproducible searches.

    Raises:
        ScenarioError: a shard outside 0..shards-1.
    """
    if shards < 1 or not 0 <= shard < shards:
        raise ScenarioError(f"--shard {shard}/{shards}: allowed: I/N with 0 <= I < N")
    if shards == 1:
        return seed
    digest = hashlib.sha256(f"simfs-explore:{seed}:{shard}/{shards}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def explore(scenario: type[Scenario], variant: str, *, examples: int = 200,
            budget_s: float | None = None, seed: int = 0, shard: int = 0, shards: int = 1,
            database: str | None = None,
            on_example: Callable[[SearchState], None] | None = None) -> SearchState:
    """Search ``variant`` of ``scenario`` for an invariant violation, and shrink it.

    Args:
        examples: the example budget of the whole campaign; a shard runs its
            share (rounded up).
        budget_s: stop generating after this many wall seconds (a failure
            already found is still shrunk).
        seed: the campaign's seed; the same seed gives the same search.
        shard, shards: run shard ``shard`` (0-based) of ``shards``.
        database: a directory for Hypothesis's example database, shared by
            every shard and machine: failures found anywhere are replayed
            first everywhere.
        on_example: called after every example with the counts so far.

    Raises:
        ScenarioError: an unknown variant, bad budget or shard.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
    from hypothesis.database import DirectoryBasedExampleDatabase

    from simfs.strategies import schedules
    from simfs.strategies._constants import local_constants_from

    declared = exploration_of(scenario)
    _check_variant(scenario, variant)
    if examples < 1:
        raise ScenarioError(f"--examples {examples}: allowed: an int >= 1")
    if budget_s is not None and not budget_s > 0:
        raise ScenarioError(f"--budget {budget_s}: allowed: seconds > 0")
    state = SearchState(scenario.name, variant)
    deadline = None if budget_s is None else state.started + budget_s
    phases = [Phase.generate, Phase.shrink]
    db = None
    if database is not None:
        # One directory per scenario and variant: Hypothesis keys saved
        # examples by test function, which is the same for all of them.
        db = DirectoryBasedExampleDatabase(os.path.join(database, scenario.name, variant))
        phases.insert(0, Phase.reuse)

    @settings(max_examples=math.ceil(examples / shards), deadline=None, database=db,
              phases=phases, report_multiple_bugs=False, verbosity=Verbosity.quiet,
              suppress_health_check=list(HealthCheck))
    # @seed below @settings: applied after settings, @seed would drop the database.
    @hypothesis_seed(shard_seed(seed, shard, shards))
    @given(example=declared.space(), world_seed=st.integers(0, 255),
           schedule=schedules(max_deviations=declared.max_deviations))
    def search(example: dict[str, Any], world_seed: int, schedule: Any) -> None:
        if deadline is not None and state.failure is None and time.perf_counter() > deadline:
            state.budget_spent = True
            raise _BudgetSpent
        outcome = declared.run(variant, example, world_seed, schedule)
        state.examples += 1
        state.virtual_s += outcome.virtual_s
        state.reached.update(outcome.reached)
        if outcome.problems:
            state.failures += 1
            if state.first_failure is None:
                state.first_failure = state.examples
            state.failure = Failure(scenario.name, variant, example, world_seed, outcome)
        if on_example is not None:
            on_example(state)
        if outcome.problems:
            raise ExampleFailed("; ".join(outcome.problems))

    try:
        with local_constants_from((sys.modules[scenario.__module__],)):
            search()
    except _BudgetSpent:
        pass
    except ExampleFailed:
        pass  # state.failure holds the minimal example: Hypothesis reran it last
    state.elapsed_s = time.perf_counter() - state.started
    return state


def _check_variant(scenario: type[Scenario], variant: str) -> None:
    names = [v.name for v in scenario.variants]
    if variant not in names:
        raise ScenarioError(f"scenario {scenario.name!r} has no variant {variant!r}; "
                            f"variants: {', '.join(names)}")


def replay(token: str) -> tuple[Failure, Outcome]:
    """Run a reported example again from its token, with its recorded schedule.

    Raises:
        ScenarioError: a damaged token, or one that is not a scenario's.
    """
    from . import get

    try:
        payload = decode_token(token)
    except ValueError as error:
        raise ScenarioError(str(error)) from None
    if payload.get("kind") != "scenario":
        raise ScenarioError(f"replay token {token[:40]!r}... is not a scenario example's "
                            "(a pytest world's token replays with pytest --simfs-replay)")
    try:
        scenario = get(payload["scenario"])
        variant, example = payload["variant"], payload["example"]
        seed, choices = payload["seed"], payload["choices"]
    except KeyError as error:
        raise ScenarioError(f"replay token {token[:40]!r}... lacks {error}") from None
    _check_variant(scenario, variant)
    outcome = exploration_of(scenario).run(variant, example, seed, list(choices))
    return Failure(scenario.name, variant, example, seed, outcome), outcome


def format_example(example: Mapping[str, Any]) -> str:
    """The example as ``name=value`` pairs, in the order the scenario drew them."""
    return ", ".join(f"{name}={value!r}" for name, value in example.items())
