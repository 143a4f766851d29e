"""The fleet simulator behind the refit scenario (seed 001), on simfs's clock.

A fleet of generation shards on the world's virtual clock, driven by trio:

- ``controller`` (a host): the trainer's refit controller.  A refit reads
  membership, rebuilds the communicator in a worker thread (the seed's
  ``await asyncio.to_thread(reconcile_communicator, ...)``; here
  ``trio.to_thread.run_sync``, which yields the loop the same way),
  transfers the weights, and promotes.  A transfer broken by a member's
  exit is retried after a backoff from a fresh read: the recovery
  re-snapshot path.
- ``supervisor`` (a host): restarts a shard whose process exits.  The
  reload takes minutes and nothing waits for it; when it lands the shard
  turns STALE (``mark_loaded``), whatever the controller is awaiting then.

The controllers: the seed's ``before`` (promote every STALE shard) and
``pr`` (promote the STALE shards of a second read taken after the awaited
rebuild), and ``reference.fleet.RefitController``.  The buggy ones keep the
seed's metric, written by the promotion (``report_refit``, seed L476); the
reference's is written by the transfer.  Each shard's real state (is its
process up, which weights does it hold) is kept apart from the ledger as
ground truth: the invariant is checked against it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import trio

from reference.fleet import (
    RefitController,
    RefitFailed,
    RefitReport,
    ShardId,
    ShardLedger,
    ShardState,
    TransferFailed,
)

from ._base import (
    Backend,
    InvariantViolated,
    ProcessSpec,
    RunRecord,
    combine_digests,
)
from ._sim import SimBackend

VARIANTS = ("before", "pr", "reference")
WINDOWS = ("W1", "W2", "W3", "W4")
WINDOW_LABELS = {"W1": "W1 before the membership read", "W2": "W2 during the rebuild",
                 "W3": "W3 during the transfer", "W4": "W4 after the promotion"}
HOSTS = {"controller": "vers=3", "supervisor": "vers=3"}
# Seed 001's table: in the communicator?, in participants? (the PR's), gets
# weights?, and the outcome before the PR, after it, and with the fix.
SEED_TABLE: dict[str, tuple[bool, bool, bool, tuple[str, str, str]]] = {
    "W1": (True, True, True, ("correct", "correct", "correct")),
    "W2": (False, True, False, ("promoted", "promoted", "skipped")),
    "W3": (False, False, False, ("promoted", "skipped", "skipped")),
    "W4": (False, False, False, ("correct", "correct", "correct")),
}


# -- what a run is made of ------------------------------------------------------------


@dataclass(frozen=True)
class Restart:
    """Shard ``shard``'s process exits at ``exits_at``; its reload takes ``reload_s``."""

    shard: ShardId
    exits_at: float
    reload_s: float

    @property
    def lands_at(self) -> float:
        return self.exits_at + self.reload_s


@dataclass(frozen=True)
class FleetPlan:
    """One run: the fleet, when refits start, how long their steps take, the restarts.

    Times are virtual seconds from the start of the run.

    Raises:
        ValueError: naming the field and what it must be.
    """

    shards: int
    refits_at: tuple[float, ...]
    rebuild_s: float
    transfer_s: float
    restarts: tuple[Restart, ...] = ()
    backoff_s: float = 300.0
    max_attempts: int = 5
    checkpoint_version: int = 0

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"shards must be >= 1, not {self.shards!r}")
        if list(self.refits_at) != sorted(self.refits_at) or any(t < 0 for t in self.refits_at):
            raise ValueError(f"refits_at must be ascending times >= 0, not {self.refits_at!r}")
        for name in ("rebuild_s", "transfer_s", "backoff_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 seconds, not {getattr(self, name)!r}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, not {self.max_attempts!r}")
        shards = [restart.shard for restart in self.restarts]
        if len(set(shards)) != len(shards):
            raise ValueError(f"restarts must name each shard at most once, not {shards}")
        for restart in self.restarts:
            if not 0 <= restart.shard < self.shards:
                raise ValueError(f"restart of shard {restart.shard}: shards are "
                                 f"0..{self.shards - 1}")
            if restart.exits_at < 0 or restart.reload_s < 0:
                raise ValueError(f"{restart!r}: times must be >= 0")

    @property
    def horizon(self) -> float:
        """Virtual seconds by which every refit and every reload is over."""
        refit = self.max_attempts * (self.backoff_s + self.rebuild_s + self.transfer_s)
        last = max([*self.refits_at, *(r.lands_at for r in self.restarts), 0.0])
        return last + len(self.refits_at) * refit + 1.0


@dataclass
class Engine:
    """Ground truth for one shard: whether its process is up, the weights it holds."""

    shard: ShardId
    alive: bool = True
    incarnation: int = 0
    holds: int | None = 0


@dataclass(frozen=True)
class Mark:
    """One step of the run, in the order it happened (its index in ``Fleet.marks``)."""

    at: float
    event: str
    shard: ShardId | None = None


@dataclass(frozen=True)
class RefitRecord:
    """One refit, observed right after its promotion (nothing yields in between)."""

    version: int
    attempts: int
    communicator: frozenset[ShardId]  # the group its last attempt was built over
    participants: frozenset[ShardId]
    promoted: frozenset[ShardId]
    stale_left: frozenset[ShardId]  # STALE after the promotion: skipped by it
    holds: tuple[int | None, ...]  # what each shard really holds
    serving: frozenset[ShardId]
    phases: tuple[int, int, int]  # indices of the last attempt's rebuild-start, rebuilt,
    #                               transferred marks
    failed: bool = False

    @property
    def delivered(self) -> frozenset[ShardId]:
        return frozenset(s for s, held in enumerate(self.holds) if held == self.version)


class Fleet:
    """The state both hosts share: ledger, ground truth, communicator, marks."""

    def __init__(self, plan: FleetPlan) -> None:
        self.plan = plan
        # time.monotonic looked up per call: inside the world it is virtual time.
        self.ledger = ShardLedger(range(plan.shards), clock=lambda: time.monotonic())
        self.engines = [Engine(shard) for shard in range(plan.shards)]
        self.marks: list[Mark] = []
        self.communicator = SimCommunicator(self)
        # The seed's per-shard weight version: 0 until report_refit writes it,
        # and only the promotion calls report_refit.
        self.seed_metric: dict[ShardId, int] = dict.fromkeys(range(plan.shards), 0)

    def mark(self, event: str, shard: ShardId | None = None) -> None:
        self.marks.append(Mark(trio.current_time(), event, shard))

    def last_mark(self, event: str) -> int:
        return max((i for i, m in enumerate(self.marks) if m.event == event), default=-1)

    def record(self, report: RefitReport) -> RefitRecord:
        states = self.ledger.states()
        start = self.last_mark("rebuild-start")
        return RefitRecord(
            report.version, report.attempts, frozenset(self.communicator.group),
            report.participants, report.promoted,
            frozenset(s for s, state in states.items() if state is ShardState.STALE),
            tuple(engine.holds for engine in self.engines),
            frozenset(s for s, state in states.items()
                      if state in (ShardState.HEALTHY, ShardState.SUSPECT)),
            (start, self.last_mark("rebuilt"), self.last_mark("transferred")))

    def window_of(self, landing: int, record: RefitRecord) -> str:
        """Which window of ``record``'s last attempt the mark at ``landing`` fell in."""
        start, rebuilt, transferred = record.phases
        if landing < start:
            return "W1"
        if landing < rebuilt:
            return "W2"
        return "W3" if landing < transferred else "W4"

    def landing(self, shard: ShardId, before: int | None = None) -> int | None:
        """Index of the shard's last reload landing (before mark ``before``)."""
        found = [i for i, m in enumerate(self.marks[:before])
                 if m.event == "landed" and m.shard == shard]
        return found[-1] if found else None


class SimCommunicator:
    """The collective: rebuilt in a worker thread, a transfer that takes time.

    A transfer fails when a member's process went away since the rebuild
    began, as a NCCL collective does; it never reaches a shard outside the
    group it was built over.
    """

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self.group: dict[ShardId, int] = {}  # member -> incarnation it joined with

    async def rebuild(self, members: frozenset[ShardId]) -> None:
        engines = self._fleet.engines
        self.group = {shard: engines[shard].incarnation for shard in sorted(members)}
        self._fleet.mark("rebuild-start")
        await trio.to_thread.run_sync(time.sleep, self._fleet.plan.rebuild_s)
        self._fleet.mark("rebuilt")

    async def transfer(self, members: frozenset[ShardId], version: int) -> None:
        if members != frozenset(self.group):
            raise ValueError(f"transfer to {sorted(members)}, but the communicator was "
                             f"built over {sorted(self.group)}")
        await trio.sleep(self._fleet.plan.transfer_s)
        engines = self._fleet.engines
        gone = [s for s, joined in self.group.items()
                if not engines[s].alive or engines[s].incarnation != joined]
        if gone:
            self._fleet.mark("transfer-failed")
            raise TransferFailed(f"shards {gone} left the group during the transfer")
        for shard in self.group:
            engines[shard].holds = version
        self._fleet.mark("transferred")


# -- the controllers: the seed's two, and the reference --------------------------------


class _SeedController:
    """The seed's refit loop: retry after a backoff; the metric written by promotion."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._ledger = fleet.ledger
        self._communicator = fleet.communicator

    async def refit(self, version: int) -> RefitReport:
        plan = self._fleet.plan
        for attempt in range(1, plan.max_attempts + 1):
            if attempt > 1:
                await trio.sleep(plan.backoff_s)
            try:
                participants, promoted = await self._attempt(version)
            except TransferFailed:
                continue
            for shard in promoted:  # report_refit (seed L476), called only from here
                self._fleet.seed_metric[shard] = version
            return RefitReport(version, participants, promoted, attempt)
        raise RefitFailed(f"refit to version {version} failed {plan.max_attempts} times")

    async def _attempt(self, version: int) -> tuple[frozenset[ShardId], frozenset[ShardId]]:
        raise NotImplementedError


class BeforeController(_SeedController):
    """Before the PR: the promotion asks each shard only "are you STALE?"."""

    async def _attempt(self, version: int) -> tuple[frozenset[ShardId], frozenset[ShardId]]:
        membership = self._ledger.membership()
        await self._communicator.rebuild(membership.members)
        await self._communicator.transfer(membership.members, version)
        everyone = frozenset(self._ledger.shards)
        return everyone, self._ledger.promote(everyone)


class PrController(_SeedController):
    """The PR: participants from a second read, after the awaited reconcile (W2 open)."""

    async def _attempt(self, version: int) -> tuple[frozenset[ShardId], frozenset[ShardId]]:
        membership = self._ledger.membership()  # _reconcile_refit_membership, L3443
        await self._communicator.rebuild(membership.members)
        participants = self._ledger.membership().members  # _refit_participants, L4705
        await self._communicator.transfer(membership.members, version)
        return participants, self._ledger.promote(participants)


class Refitter(Protocol):
    async def refit(self, version: int) -> RefitReport:
        """Deliver ``version``; promote; say who took part and who was promoted."""


def _controller(variant: str, fleet: Fleet) -> Refitter:
    if variant == "before":
        return BeforeController(fleet)
    if variant == "pr":
        return PrController(fleet)
    if variant == "reference":
        return RefitController(fleet.ledger, fleet.communicator,
                               max_attempts=fleet.plan.max_attempts,
                               recovery_backoff=fleet.plan.backoff_s)
    raise ValueError(f"unknown variant {variant!r}; variants: {', '.join(VARIANTS)}")


# -- the two hosts' processes ---------------------------------------------------------------


async def run_controller(root: str, fleet: Fleet, variant: str) -> list[RefitRecord]:
    """The trainer's side: one refit per ``refits_at``, to versions 1, 2, ..."""
    controller = _controller(variant, fleet)
    records = []
    for version, at in enumerate(fleet.plan.refits_at, start=1):
        await trio.sleep_until(at)
        try:
            report = await controller.refit(version)
        except RefitFailed:
            records.append(RefitRecord(version, fleet.plan.max_attempts, frozenset(),
                                       frozenset(), frozenset(), frozenset(), (), frozenset(),
                                       (-1, -1, -1), failed=True))
            continue
        records.append(fleet.record(report))
    return records


async def run_supervisor(root: str, fleet: Fleet) -> None:
    """Restart each shard whose process exits; its reload lands minutes later."""
    async with trio.open_nursery() as nursery:
        for restart in fleet.plan.restarts:
            nursery.start_soon(_restart, fleet, restart)


async def _restart(fleet: Fleet, restart: Restart) -> None:
    await trio.sleep_until(restart.exits_at)
    engine, ledger = fleet.engines[restart.shard], fleet.ledger
    engine.alive, engine.holds = False, None
    engine.incarnation += 1
    ledger.mark_dead(restart.shard)
    fleet.mark("exited", restart.shard)
    ledger.mark_restarting(restart.shard)
    await trio.sleep(restart.reload_s)
    engine.alive, engine.holds = True, fleet.plan.checkpoint_version
    ledger.mark_loaded(restart.shard, fleet.plan.checkpoint_version)
    fleet.mark("landed", restart.shard)


# -- a run, its invariant, its replay --------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    """A shard HEALTHY without this refit's weights; ``window`` of its last reload."""

    version: int
    shard: ShardId
    holds: int | None
    promoted: bool
    window: str | None
    attempt: int = 1

    def describe(self) -> str:
        how = "promoted to HEALTHY" if self.promoted else "left serving"
        where = ("" if self.window is None
                 else f"; its reload landed in {WINDOW_LABELS[self.window]}")
        if self.window is not None and self.attempt > 1:
            where += f" of the recovery re-snapshot (attempt {self.attempt})"
        return (f"refit {self.version} {how} shard {self.shard} holding version "
                f"{self.holds}, not {self.version}{where}")


@dataclass
class FleetRun(RunRecord):
    """What one fleet run did: its records, marks, schedule and violations."""

    replay_imports: ClassVar[str] = "from scenarios.refit import *"
    replay_call: ClassVar[tuple[str, str]] = ("check_invariant", "run_fleet")

    variant: str
    plan: FleetPlan
    seed: int
    fleet: Fleet
    records: list[RefitRecord]
    choices: list[int]
    digest: str
    violations: list[Violation] = field(default_factory=list)

    def metric(self) -> dict[ShardId, int | None]:
        """The per-shard weight version the variant publishes."""
        if self.variant == "reference":
            return {s: self.fleet.ledger.weight_version(s) for s in range(self.plan.shards)}
        return dict(self.fleet.seed_metric)

    def landing_windows(self) -> list[str]:
        """The window of each reload landing, against the refit that ended next after it.

        A landing after every refit is W4 of the last; exploration uses this
        to show it reached the windows it claims to check.
        """
        windows = []
        done = [r for r in self.records if not r.failed]
        for index, mark in enumerate(self.fleet.marks):
            if mark.event != "landed":
                continue
            after = [r for r in done if r.phases[2] > index]
            windows.append(self.fleet.window_of(index, after[0]) if after
                           else "W4" if done else "W1")
        return windows



class RefitInvariantViolated(InvariantViolated):
    """A shard became or stayed HEALTHY without the refit's weights."""

    run: FleetRun

    def __init__(self, run: FleetRun) -> None:
        self.window = run.violations[0].window
        super().__init__(run, *(f"variant {run.variant!r}: " + v.describe()
                                for v in run.violations))


def _violations(fleet: Fleet, records: Sequence[RefitRecord]) -> list[Violation]:
    found = []
    for record in records:
        if record.failed:
            continue
        for shard in sorted(record.serving):
            held = record.holds[shard]
            if held == record.version:
                continue
            landing = fleet.landing(shard, before=record.phases[2] + 1)
            window = None if landing is None else fleet.window_of(landing, record)
            found.append(Violation(record.version, shard, held, shard in record.promoted,
                                   window, record.attempts))
    return found


def run_fleet_on(backend: Backend, plan: FleetPlan, variant: str, seed: int) -> FleetRun:
    """Run ``plan`` under ``variant`` in one fresh session of ``backend``."""
    session = backend.session(HOSTS, seed)
    fleet = Fleet(plan)
    try:
        results = session.run([
            ProcessSpec("controller", run_controller, (fleet, variant), "controller"),
            ProcessSpec("supervisor", run_supervisor, (fleet,), "supervisor"),
        ], timeout=plan.horizon)
        choices = session.choices()
    finally:
        digest = session.close()
    records: list[RefitRecord] = results[0]
    marks = "\n".join(f"{m.at!r} {m.event} {m.shard}" for m in fleet.marks)
    digest = combine_digests([digest, hashlib.sha256(marks.encode()).hexdigest()])
    return FleetRun(variant, plan, seed, fleet, records, choices, digest,
                    _violations(fleet, records))


def run_fleet(plan: FleetPlan, variant: str, *, seed: int = 0,
              chooser: Callable[[int], int] | Sequence[int] | None = None) -> FleetRun:
    """Run ``plan`` in a world; ``chooser`` as for ``simfs.World`` (a replay: a list)."""
    backend = SimBackend() if chooser is None else SimBackend(chooser=chooser)
    return run_fleet_on(backend, plan, variant, seed)


def tape_chooser(tape: Sequence[int]) -> Callable[[int], int]:
    """A chooser that reads a pre-drawn tape: choice ``i`` is ``tape[i] % n``, then 0.

    Exploration draws the tape up front rather than calling ``data.draw``
    from inside the run: a draw that ends the example mid-run makes simfs
    tear down a trio process waiting on a worker thread, which costs the
    10 s step timeout.
    """
    position = iter(range(len(tape)))

    def choose(count: int) -> int:
        index = next(position, None)
        return 0 if index is None else tape[index] % count

    return choose


def check_invariant(run: FleetRun) -> None:
    """Raises: RefitInvariantViolated, naming the window and how to replay it."""
    if run.violations:
        raise RefitInvariantViolated(run)


GRID_S = 10


def fleet_plans() -> Any:
    """A Hypothesis strategy of fleets: 2-5 shards, one or two refits, up to three
    restarts of distinct shards.

    The steps take the replay's times (rebuild 30 s, transfer 90 s) and a
    60 s backoff; every time is on a 10 s grid, so a reload landing at the
    very instant a read or an await happens is common and the chooser
    decides which runs first.  Draws are plain integers (no ``builds``,
    no ``unique_by``): cheap to generate, and they shrink to one restart.
    Hypothesis is imported here, not with the module: ``python -m scenarios
    run`` never loads it.
    """
    from hypothesis import strategies as st

    @st.composite
    def plans(draw: st.DrawFn) -> FleetPlan:
        shards = draw(st.integers(2, 5))
        first = GRID_S * draw(st.integers(0, 60))
        refits = (first,) if draw(st.integers(1, 2)) == 1 else (
            first, first + GRID_S * draw(st.integers(0, 60)))
        free = list(range(shards))
        restarts = []
        for _ in range(draw(st.integers(0, min(3, shards)))):
            shard = free.pop(draw(st.integers(0, len(free) - 1)))
            restarts.append(Restart(shard, GRID_S * draw(st.integers(0, 60)),
                                    GRID_S * draw(st.integers(6, 36))))
        return FleetPlan(shards, refits, rebuild_s=30, transfer_s=90,
                         restarts=tuple(restarts), backoff_s=60)

    return plans()


def plan_to_json(plan: FleetPlan) -> dict[str, Any]:
    """A plan as plain JSON values (for replay tokens); ``plan_from_json`` inverts it."""
    return {"shards": plan.shards, "refits_at": list(plan.refits_at),
            "rebuild_s": plan.rebuild_s, "transfer_s": plan.transfer_s,
            "restarts": [[r.shard, r.exits_at, r.reload_s] for r in plan.restarts],
            "backoff_s": plan.backoff_s, "max_attempts": plan.max_attempts,
            "checkpoint_version": plan.checkpoint_version}


def plan_from_json(data: dict[str, Any]) -> FleetPlan:
    """Raises: ValueError (an invalid plan), KeyError (a missing field)."""
    return FleetPlan(data["shards"], tuple(data["refits_at"]), data["rebuild_s"],
                     data["transfer_s"], tuple(Restart(*r) for r in data["restarts"]),
                     data["backoff_s"], data["max_attempts"], data["checkpoint_version"])
