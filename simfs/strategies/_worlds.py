"""Schedules, worlds, and ``explore``: a test body run over drawn worlds.

A schedule is drawn at the world's real choice points (two or more
processes runnable at one instant) and shrinks toward first-come order; a
world is hosts with drawn mount options, a drawn fault plan and a schedule.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from .._nfs._faults import FaultPlan
from .._replay import CURRENT_TEST, world_from_token, world_token
from .._world import World

DEFAULT_MAX_DEVIATIONS: Final = 16


# -- schedules ------------------------------------------------------------------------------


class Schedule:
    """A chooser for ``World(chooser=...)`` that Hypothesis draws at real choice points.

    The world asks only when two or more processes are runnable at one
    instant, on the test's own thread.  Choice 0 is the process that became
    runnable first: the order a run takes when nothing is interleaved.  A
    schedule is that order plus a few *deviations*, each drawn as "another
    deviation?", how many choice points it comes after the last one, and
    (when the run gets there, with the real count) which other process runs.
    The default order is one draw ("no deviation"), shorter than any
    schedule with a deviation, so a failing schedule shrinks toward it and
    keeps only the deviations the failure needs.  After ``max_deviations``
    it draws nothing more, which bounds what one example can consume.
    """

    def __init__(self, draw: st.DrawFn, max_deviations: int) -> None:
        self._draw = draw
        self.max_deviations = max_deviations
        self.choices: list[int] = []
        self.deviations = 0
        self._gap: int | None = None  # choice points left before the next deviation
        self._done = max_deviations == 0

    def __call__(self, count: int) -> int:
        choice = 0
        if not self._done and self._gap is None:
            if self._draw(st.booleans()):
                self._gap = self._draw(_GAPS)
            else:
                self._done = True
        if self._gap is not None:
            if self._gap == 0:
                self._gap = None
                choice = self._draw(st.integers(1, count - 1))
                self.deviations += 1
                self._done = self.deviations >= self.max_deviations
            else:
                self._gap -= 1
        self.choices.append(choice)
        return choice

    def __repr__(self) -> str:
        drawn = f"; chose {self.choices}" if self.choices else ""
        return f"Schedule(max_deviations={self.max_deviations}{drawn})"


# Half the deviations come within the next four choice points: most runs
# have only a handful, and a far-off deviation would rarely be reached.
_GAPS: Final = st.one_of(st.integers(0, 3), st.integers(0, 63))


def schedules(*, max_deviations: int = DEFAULT_MAX_DEVIATIONS) -> SearchStrategy[Schedule]:
    """Schedules to pass as ``World(chooser=...)``; they shrink toward first-come order.

    This is what the README's old hint (``chooser=`` a Hypothesis
    ``data.draw``) meant: ``data.draw`` takes a strategy, not a count, so a
    chooser must draw its answer itself; this one does, lazily, inside the
    example that drew it.  Use one ``Schedule`` for one world.

    Raises:
        ValueError: ``max_deviations`` below 0.
    """
    if max_deviations < 0:
        raise ValueError(f"max_deviations must be >= 0, not {max_deviations!r}")

    @st.composite
    def schedule(draw: st.DrawFn) -> Schedule:
        return Schedule(draw, max_deviations)

    return schedule()


# -- worlds ---------------------------------------------------------------------------------


HostSpec = Mapping[str, "str | SearchStrategy[str]"]


def worlds(hosts: HostSpec | None = None, *, faults: SearchStrategy[FaultPlan] | None = None,
           seeds: SearchStrategy[int] | None = None, max_deviations: int = DEFAULT_MAX_DEVIATIONS,
           export: str = "/shared") -> SearchStrategy[World]:
    """Fresh worlds with hosts mounted as drawn, a fault plan and a drawn schedule.

    Args:
        hosts: host name to nfs(5) options, or to a strategy of them (e.g.
            ``mount_options()``); default two hosts ``a`` and ``b`` with
            Linux's defaults.
        faults: a strategy of fault plans (default: none).
        seeds: the world's seed (trio's order, temp names); default 0-255,
            shrinking to 0.
        max_deviations: as for ``schedules``.
        export: where every host mounts the export.
    """
    spec = dict(hosts) if hosts is not None else {"a": "vers=3", "b": "vers=3"}
    mounts = {name: st.just(value) if isinstance(value, str) else value
              for name, value in spec.items()}
    plans = faults if faults is not None else st.just(FaultPlan())
    seed_strategy = seeds if seeds is not None else st.integers(0, 255)

    @st.composite
    def world(draw: st.DrawFn) -> World:
        seed = draw(seed_strategy)
        chosen = {name: draw(strategy) for name, strategy in mounts.items()}
        plan = draw(plans)
        made = World(seed, export=export, chooser=draw(schedules(max_deviations=max_deviations)),
                     faults=plan if plan != FaultPlan() else None)
        for name, mount in chosen.items():
            made.host(name, mount=mount)
        note(f"simfs world: seed={seed}, hosts={chosen}, faults={plan!r}")
        return made

    return world()


Test = Callable[..., None]


def explore(hosts: HostSpec | None = None, *, faults: SearchStrategy[FaultPlan] | None = None,
            seeds: SearchStrategy[int] | None = None, max_deviations: int = DEFAULT_MAX_DEVIATIONS,
            export: str = "/shared", max_examples: int = 100,
            hypothesis_settings: settings | None = None) -> Callable[[Test], Test]:
    """Run a test body under Hypothesis over schedules, faults, mounts and seeds.

    The decorated test takes a ``world`` argument: a fresh world per
    example, built as ``worlds(...)`` draws it (the remaining arguments stay
    pytest fixtures).  The world is closed after each example.  On a
    failure the report carries a replay token; with the simfs pytest plugin,
    ``pytest NODEID --simfs-replay TOKEN`` runs the body once on exactly that
    world and schedule, without Hypothesis.

    Args:
        hosts, faults, seeds, max_deviations, export: as for ``worlds``.
        max_examples: Hypothesis's example budget.
        hypothesis_settings: other Hypothesis settings (a database, phases,
            derandomize); the deadline is always off, because a simulated
            run's wall time says nothing about the code under test.
    """
    strategy = worlds(hosts, faults=faults, seeds=seeds, max_deviations=max_deviations,
                      export=export)
    built_hosts = list(hosts) if hosts is not None else ["a", "b"]

    def decorate(test: Test) -> Test:
        if "world" not in inspect.signature(test).parameters:
            raise TypeError(f"{test.__name__} must take a 'world' argument to be explored")

        def run_on(world: World, args: tuple[Any, ...], kwargs: dict[str, Any],
                   searching: bool = True) -> None:
            try:
                test(*args, world=world, **kwargs)
            except BaseException:
                token = world_token(world, built_hosts)
                if searching:
                    note(f"simfs schedule: {world.choices}; replay token: {token}")
                record = CURRENT_TEST.get()
                if record is not None:
                    record.worlds.append((world, token))
                raise
            finally:
                world.close()

        @functools.wraps(test)
        def example(*args: Any, world: World, **kwargs: Any) -> None:
            run_on(world, args, kwargs)

        parent = hypothesis_settings if hypothesis_settings is not None else settings()
        searched = settings(parent, max_examples=max_examples, deadline=None,
                            suppress_health_check=[*parent.suppress_health_check,
                                                   HealthCheck.too_slow])(
            given(world=strategy)(example))

        @functools.wraps(searched)
        def explored(*args: Any, **kwargs: Any) -> None:
            record = CURRENT_TEST.get()
            if record is not None and record.replay is not None:
                run_on(world_from_token(record.replay), args, kwargs, searching=False)
                return
            searched(*args, **kwargs)

        # pytest reads the signature: Hypothesis's, without ``world``.
        explored.__signature__ = inspect.signature(searched)  # type: ignore[attr-defined]
        return explored

    return decorate
