"""Schedules, worlds, and ``explore``: a test body run over drawn worlds.

A schedule is drawn at the world's real choice points (two or more
processes runnable at one instant) and shrinks toward first-come order; a
world is hosts with drawn mount options, a drawn fault plan and a schedule.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Final

from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from .._failure import describe, replay_line
from .._nfs._faults import FaultPlan
from .._nfs._mount import MountOptions
from .._replay import CURRENT_TEST, world_from_token, world_token
from .._world import World
from ._constants import local_constants_from

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
Setup = Callable[[World], object]


def _host_strategies(hosts: HostSpec | None) -> dict[str, SearchStrategy[str]]:
    """Each host's mount options as a strategy, refusing what ``World.host`` would not take.

    Raises:
        TypeError: ``hosts`` is not a mapping, a name is not a str, or a
            value is neither nfs(5) options (a str) nor a strategy of them.
        MountOptionError: a fixed option string simfs cannot honour.
    """
    if hosts is None:
        return {"a": st.just("vers=3"), "b": st.just("vers=3")}
    if not isinstance(hosts, Mapping):
        raise TypeError(f"hosts must map host names to nfs(5) options, not {hosts!r}; "
                        "e.g. hosts={'a': 'vers=3', 'b': mount_options()}")
    mounts: dict[str, SearchStrategy[str]] = {}
    for name, value in hosts.items():
        if not isinstance(name, str) or not name or any(c.isspace() for c in name):
            raise TypeError(f"hosts: a host name must be a non-empty word, not {name!r}")
        if isinstance(value, str):
            MountOptions.parse(value)  # a bad option fails here, not in every example
            mounts[name] = st.just(value)
        elif isinstance(value, SearchStrategy):
            mounts[name] = value
        else:
            raise TypeError(f"hosts[{name!r}] = {value!r}: allowed: nfs(5) options as a str "
                            "(e.g. 'vers=3,acdirmin=3') or a strategy of them "
                            "(e.g. mount_options())")
    return mounts


def _check_setup(setup: Setup | None) -> None:
    if setup is not None and not callable(setup):
        raise TypeError(f"setup must be a callable taking the world, not {setup!r}; e.g. "
                        "setup=lambda world: world.server.mkdir('/shared/step')")


def worlds(hosts: HostSpec | None = None, *, faults: SearchStrategy[FaultPlan] | None = None,
           seeds: SearchStrategy[int] | None = None, max_deviations: int = DEFAULT_MAX_DEVIATIONS,
           export: str = "/shared", setup: Setup | None = None) -> SearchStrategy[World]:
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
        setup: called with each fresh world *before any host mounts*, to
            prepare the export (``world.server.mkdir(...)``,
            ``world.server.write_text(...)``).  What it makes is older than every
            mount, as what a job finds when it starts is.

    Raises:
        TypeError: a malformed ``hosts`` or a ``setup`` that is not callable.
    """
    mounts = _host_strategies(hosts)
    _check_setup(setup)
    plans = faults if faults is not None else st.just(FaultPlan())
    seed_strategy = seeds if seeds is not None else st.integers(0, 255)
    # Made once: a strategy made inside the draw was made again for every
    # example, and Hypothesis reads a composite's source when one is made
    # (half of the README marker example's time per example went there).
    schedule_strategy = schedules(max_deviations=max_deviations)

    @st.composite
    def world(draw: st.DrawFn) -> World:
        seed = draw(seed_strategy)
        chosen = {name: draw(strategy) for name, strategy in mounts.items()}
        plan = draw(plans)
        made = World(seed, export=export, chooser=draw(schedule_strategy),
                     faults=plan if plan != FaultPlan() else None)
        if setup is not None:
            setup(made)
        for name, mount in chosen.items():
            made.host(name, mount=mount)
        note(f"simfs world: seed={seed}, hosts={chosen}, faults={plan!r}")
        return made

    return world()


Test = Callable[..., None]


def _modules_of(test: Callable[..., Any]) -> tuple[ModuleType, ...]:
    """The module that holds ``test`` (none for a function made in no module)."""
    module = sys.modules.get(getattr(test, "__module__", "") or "")
    return () if module is None else (module,)


def explore(hosts: HostSpec | None = None, *, faults: SearchStrategy[FaultPlan] | None = None,
            seeds: SearchStrategy[int] | None = None, max_deviations: int = DEFAULT_MAX_DEVIATIONS,
            export: str = "/shared", setup: Setup | None = None, max_examples: int = 100,
            hypothesis_settings: settings | None = None,
            explain: bool = False) -> Callable[[Test], Test]:
    """Run a test body under Hypothesis over schedules, faults, mounts and seeds.

    The decorated test takes a ``world`` argument: a fresh world per
    example, built as ``worlds(...)`` draws it.  The world is closed after
    each example.  On a failure the report carries a replay token; with the
    simfs pytest plugin, ``pytest NODEID --simfs-replay TOKEN`` runs the body
    once on exactly that world and schedule, without Hypothesis, and
    ``--simfs-seed N`` fixes every example's seed to N.

    Order: every host in ``hosts`` has mounted the export before the body
    runs, so what the body does to ``world.server`` happens *after* the
    mounts; ``setup(world)`` runs on each fresh world *before* any host
    mounts (and again, in the same place, on a replay).  Use ``setup`` for
    what a job finds when it starts.  (For a marker polled in a directory
    made either way, both orders stall for acdirmin on Linux 6.1, measured:
    docs/nfs-facts.md, "A directory made before or after the mount".)

    The test's other arguments stay pytest fixtures, made once for the
    test and shared by all its examples (a ``tmp_path`` is one directory
    for all of them; Hypothesis's health check against that is off here).

    Args:
        hosts, faults, seeds, max_deviations, export, setup: as for ``worlds``.
        max_examples: Hypothesis's example budget.
        hypothesis_settings: other Hypothesis settings (a database, phases,
            derandomize); the deadline is always off, because a simulated
            run's wall time says nothing about the code under test.
        explain: also run Hypothesis's explain phase, which adds to its
            report the lines that only failing examples ran.  Off by
            default, whatever ``hypothesis_settings`` says: once a failure
            is found, that phase traces every line of every shrinking
            example, simulated processes and simfs included, which made the
            README's search 2.6-3.6x slower for the same examples found and
            shrunk (``bench/explore_identity.py``), and simfs's own report
            already names the failing process, its call and its path.

    Raises:
        TypeError: a malformed ``hosts``, a ``setup`` that is not callable,
            or (when decorating) a test without a ``world`` argument, or an
            ``explain`` that is not a bool.
    """
    if not isinstance(explain, bool):
        raise TypeError(f"explore(explain={explain!r}): explain must be True or False")
    strategy = worlds(hosts, faults=faults, seeds=seeds, max_deviations=max_deviations,
                      export=export, setup=setup)
    built_hosts = list(hosts) if hosts is not None else ["a", "b"]

    def decorate(test: Test) -> Test:
        if "world" not in inspect.signature(test).parameters:
            raise TypeError(f"{test.__name__} must take a 'world' argument to be explored")

        def run_on(world: World, args: tuple[Any, ...], kwargs: dict[str, Any],
                   searching: bool = True) -> None:
            __tracebackhide__ = True
            try:
                test(*args, world=world, **kwargs)
            except BaseException as error:
                record = CURRENT_TEST.get()
                token = world_token(world, built_hosts,
                                    test=None if record is None else record.nodeid)
                if searching:
                    note(f"simfs schedule: {world.choices}; replay token: {token}")
                if record is not None:
                    record.worlds.append((world, token))
                    # Now, while the world's descriptors and caches are as the
                    # failure left them: close() runs every process out.
                    record.report = describe(
                        world, error, replay_line(record.nodeid or test.__name__, world, token),
                        full=record.full_trace)
                raise
            finally:
                world.close()

        @functools.wraps(test)
        def example(*args: Any, world: World, **kwargs: Any) -> None:
            __tracebackhide__ = True
            run_on(world, args, kwargs)

        parent = hypothesis_settings if hypothesis_settings is not None else settings()
        phases = tuple(phase for phase in parent.phases if explain or phase is not Phase.explain)
        searched_by_seed: dict[int | None, Callable[..., None]] = {}

        def searched_with(seed: int | None) -> Callable[..., None]:
            """The Hypothesis test; ``--simfs-seed`` fixes the seed of every example."""
            if seed not in searched_by_seed:
                drawn = strategy if seed is None else worlds(
                    hosts, faults=faults, seeds=st.just(seed), max_deviations=max_deviations,
                    export=export, setup=setup)
                searched_by_seed[seed] = settings(
                    parent, max_examples=max_examples, deadline=None, phases=phases,
                    suppress_health_check=[*parent.suppress_health_check, HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])(
                    given(world=drawn)(example))
            return searched_by_seed[seed]

        searched = searched_with(None)

        @functools.wraps(searched)
        def explored(*args: Any, **kwargs: Any) -> None:
            __tracebackhide__ = True
            record = CURRENT_TEST.get()
            if record is not None and record.replay is not None:
                run_on(world_from_token(record.replay, setup=setup, hosts=built_hosts),
                       args, kwargs, searching=False)
                return
            # The literals Hypothesis draws from are the test module's, not
            # whatever else this process imported (_constants.py says why).
            with local_constants_from(_modules_of(test)):
                searched_with(None if record is None else record.seed)(*args, **kwargs)

        # pytest reads the signature: Hypothesis's, without ``world``.
        explored.__signature__ = inspect.signature(searched)  # type: ignore[attr-defined]
        return explored

    return decorate
