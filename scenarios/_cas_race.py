"""One race of the CAS scenario, counted: collisions, corrupt reads, failures, temps left.

``scenarios.cas`` re-exports these; the plan a race follows (``RacePlan``)
lives there, as the one value exploration varies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from . import _cas_sim as sim
from ._base import InvariantViolated, ProcessSpec, RunRecord, Session
from ._cas_sim import HOSTS, KEY, MOUNT

if TYPE_CHECKING:
    from .cas import RacePlan

# What a race can get wrong: temp-name collisions, corrupt reads served,
# writers that raised, temps left behind.
PROBLEM_KINDS = ("collision", "corrupt", "failed", "temps")


@dataclass
class RaceRun(RunRecord):
    """What one race trial did, per writer, and the counts the row sums."""

    replay_imports: ClassVar[str] = "from scenarios.cas import *; from simfs import *"
    replay_call: ClassVar[tuple[str, str]] = ("check_race", "run_race")

    plan: RacePlan
    variant: str
    seed: int
    results: list[dict[str, Any]]
    temps_left: list[str]
    choices: list[int] = field(default_factory=list)
    digest: str = ""
    virtual_s: float = 0.0  # the world's clock at the end (a fresh world's race)

    @property
    def collisions(self) -> int:
        return count_collisions([result["journal"] for result in self.results])

    @property
    def corrupt_served(self) -> int:
        return sum(result["corrupt"] for result in self.results)

    @property
    def failed(self) -> int:
        return sum(result["error"] is not None for result in self.results)

    @property
    def blake3_passes(self) -> int:
        return max((result["max_passes"] for result in self.results), default=0)

    def problems(self, kinds: Sequence[str] = PROBLEM_KINDS) -> list[str]:
        """What went wrong, of the ``kinds`` asked for (default: all of them)."""
        unknown = set(kinds) - set(PROBLEM_KINDS)
        if unknown:
            raise ValueError(f"unknown problem kinds {sorted(unknown)}; allowed: "
                             f"{', '.join(PROBLEM_KINDS)}")
        found = []
        if "collision" in kinds and self.collisions:
            found.append(f"{self.collisions} temp-name collisions")
        if "corrupt" in kinds and self.corrupt_served:
            found.append(f"{self.corrupt_served} corrupt reads served")
        if "failed" in kinds:
            found.extend(f"writer {index} ({self.plan.writers[index].host}) failed: "
                         f"{result['error']}" for index, result in enumerate(self.results)
                         if result["error"])
        if "temps" in kinds and self.temps_left:
            found.append(f"temps left: {self.temps_left}")
        return found



class CasInvariantViolated(InvariantViolated):
    """A race collided on a temp, served corrupt bytes, failed a writer or left a temp."""

    run: RaceRun

    def __init__(self, run: RaceRun, kinds: Sequence[str] = ()) -> None:
        self.kinds = tuple(kinds) or PROBLEM_KINDS
        super().__init__(run, f"variant {run.variant!r}, {len(run.plan.writers)} writers: "
                         + "; ".join(run.problems(self.kinds)), f"plan: {run.plan!r}")


def count_collisions(journals: Sequence[Sequence[Sequence[Any]]]) -> int:
    """Pairs of writers that held one temp name open over overlapping times."""
    spans: dict[str, list[tuple[int, float, float]]] = {}
    for writer, journal in enumerate(journals):
        opened: dict[str, float] = {}
        for event, path, stamp in journal:
            if event == "temp-open":
                opened[path] = stamp
            elif event == "temp-done" and path in opened:
                spans.setdefault(path, []).append((writer, opened.pop(path), stamp))
    collisions = 0
    for held in spans.values():
        for index, (first, start, end) in enumerate(held):
            collisions += sum(1 for other, begin, finish in held[index + 1:]
                              if other != first and begin < end and start < finish)
    return collisions


def _race_specs(plan: RacePlan, variant: str, directory: str) -> list[ProcessSpec]:
    files = sim.model_files(plan.chunks, plan.chunk)
    return [ProcessSpec(writer.host, sim.race_writer,
                        (directory, variant, files, KEY, writer.start_s, plan.chunk,
                         writer.chunk_s), f"writer-{index}")
            for index, writer in enumerate(plan.writers)]


def _race_timeout(plan: RacePlan) -> float:
    return 60.0 + sum(w.start_s + 2 * (plan.chunks + 1) * w.chunk_s for w in plan.writers)


def race_on(session: Session, plan: RacePlan, variant: str, directory: str) -> RaceRun:
    """One trial in an open session: prepare the root, race, list the temps left."""
    session.run([ProcessSpec(HOSTS[0], sim.prepare, (directory,), "prepare")], timeout=60)
    files = sim.model_files(plan.chunks, plan.chunk)
    if plan.stale_blob:
        session.run([ProcessSpec(HOSTS[0], sim.plant_stale_blob, (directory, files, KEY),
                                 "another-pod")], timeout=60)
    results = session.run(_race_specs(plan, variant, directory), timeout=_race_timeout(plan))
    (left,) = session.run([ProcessSpec(HOSTS[0], list_temps, (directory,), "list")],
                          timeout=60)
    return RaceRun(plan, variant, 0, results, left)


def list_temps(root: str, directory: str) -> list[str]:
    """Temps left in the trial's root once every writer is done."""
    import os

    base = os.path.join(root, directory)
    return [f"{sub}/{name}" for sub in ("blobs", "snapshots")
            if os.path.isdir(os.path.join(base, sub))
            for name in sorted(os.listdir(os.path.join(base, sub))) if sim.is_temp(name)]


def run_race(plan: RacePlan, variant: str, *, seed: int = 0,
             chooser: Callable[[int], int] | Sequence[int] | None = None) -> RaceRun:
    """One race in a fresh simulated world (exploration and replay).

    Args:
        plan: the writers, their hosts, starts and bandwidths.
        variant: ``seed`` or ``reference``.
        seed: the world's seed.
        chooser: who runs first among simultaneously runnable processes.
    """
    from ._sim import SimSession

    session = SimSession(dict.fromkeys(HOSTS, MOUNT), seed, chooser=chooser)
    try:
        run = race_on(session, plan, variant, "cas/race")
        virtual_s = session.world.now
    finally:
        digest = session.close()
    run.seed, run.choices, run.digest, run.virtual_s = (seed, session.world.choices, digest,
                                                        virtual_s)
    return run


def check_race(run: RaceRun, kinds: Sequence[str] = PROBLEM_KINDS) -> None:
    """Raises: CasInvariantViolated (problems of ``kinds``), with the plan and a replay line."""
    if run.problems(kinds):
        raise CasInvariantViolated(run, kinds)
