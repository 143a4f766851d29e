"""Seed 004: a content-addressed model cache on a volume many pods write at once.

The CAS root moved from pod-local disk to a volume every pod of an endpoint
mounts (seed 004, th#850).  Experiments, one row group each:

- ``race``: ``writers`` pods on two hosts probe for a model at boot (a
  negative entry each host then trusts for acdirmin), then ensure it at
  nearly the same instant and load it.  A fixed ``.part`` or ``.building``
  name is shared by every writer of a digest: one truncates, replaces or
  removes what another is writing.
- ``seed-test``: the seed's own test.  A tree another pod materialised holds
  a corrupt blob of the right size, hard-linked; a process that never saw
  the ref ensures it and loads it.  The reference detects it, quarantines
  it, downloads again and so repairs the shared blob.
- ``crash-sweep``: a pod dies mid-download (a ``HostCrash`` in the
  simulation, ``os._exit`` on real NFS); ``stale_after`` later another pod
  downloads a second model while a third boots and sweeps.  The sweep must
  remove the dead writer's temp and leave the live writer's alone.

Variants: ``seed`` (``scenarios._cas_sim.SeedStore``: the code before the
seed's PR) and ``reference`` (``reference.cas.CasStore``).

Row columns: ``corrupt_served`` reads that returned bytes whose BLAKE3
differs from the manifest; ``collisions`` pairs of writers that had one temp
name open at once; ``failed`` writers that raised; ``orphans_left`` temps
left after the trial (crash-sweep: after the boot sweep, the live writer's
excepted); ``wrongly_swept`` live temps a sweep removed; ``blake3_passes``
the most verify passes one process made over one digest's reused bytes
(the reference: exactly 1 wherever it reused bytes; the seed: 0).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from simfs import FaultPlan, HostCrash

from . import _cas_sim as sim
from ._base import (
    Backend,
    FidelityRow,
    Param,
    ProcessSpec,
    Progress,
    Scenario,
    ScenarioResult,
    Session,
    Variant,
    combine_digests,
    format_table,
)

HOSTS = ("pod-a", "pod-b")
MOUNT = "vers=3"
KEY = "rev-1"
EXPERIMENTS = ("race", "seed-test", "crash-sweep")
FAILURE_COLUMNS = (("collision", "collisions"), ("corrupt", "corrupt_served"),
                   ("failed", "failed"), ("temps", "orphans_left"),
                   ("live-swept", "wrongly_swept"))
COLUMNS = ("experiment", "variant", "writers", "trials", "corrupt_served", "collisions",
           "failed", "orphans_left", "wrongly_swept", "repaired", "blake3_passes")


# -- what may vary in a race: one small value, for the runner and for exploration --------


@dataclass(frozen=True)
class Writer:
    """One pod racing for the model: its host, when it asks, its bandwidth."""

    host: str
    start_s: float
    chunk_s: float


@dataclass(frozen=True)
class RacePlan:
    """Everything a race trial varies; ``repr`` builds it again.

    ``stale_blob``: the volume already holds a right-size, corrupt blob of
    the weights (another pod's bytes of any age).
    """

    writers: tuple[Writer, ...]
    chunks: int = 4
    chunk: int = 4096
    stale_blob: bool = False

    def __post_init__(self) -> None:
        if len(self.writers) < 1:
            raise ValueError("a race needs at least one writer")
        for writer in self.writers:
            if writer.host not in HOSTS:
                raise ValueError(f"writer host {writer.host!r}: allowed {HOSTS}")
        if self.chunks < 1 or self.chunk < 64:
            raise ValueError(f"chunks={self.chunks!r} must be >= 1 and chunk={self.chunk!r} "
                             ">= 64 bytes")

    @classmethod
    def draw(cls, rng: random.Random, writers: int, stagger_s: float) -> RacePlan:
        """A trial of the table: writers alternate hosts, starts and bandwidths drawn."""
        return cls(tuple(Writer(HOSTS[index % 2], round(rng.uniform(0.0, stagger_s), 3),
                                rng.choice(CHUNK_TIMES))
                         for index in range(writers)))


CHUNK_TIMES = (0.05, 0.1, 0.2, 0.4)
# What a race can get wrong: temp-name collisions, corrupt reads served,
# writers that raised, temps left behind.
PROBLEM_KINDS = ("collision", "corrupt", "failed", "temps")


def race_plans(*, stale_blob: bool = True) -> Any:
    """The Hypothesis strategy over ``RacePlan``s: 1-4 writers, starts on a 50 ms grid.

    Args:
        stale_blob: whether a plan may start with a corrupt blob on the volume.
    """
    from hypothesis import strategies as st

    writer = st.builds(Writer, st.sampled_from(HOSTS),
                       st.integers(0, 20).map(lambda step: round(step * 0.05, 2)),
                       st.sampled_from(CHUNK_TIMES))
    return st.builds(RacePlan, st.lists(writer, min_size=1, max_size=4).map(tuple),
                     st.integers(1, 4), st.just(4096),
                     st.booleans() if stale_blob else st.just(False))


# -- one race, counted -----------------------------------------------------------------


@dataclass
class RaceRun:
    """What one race trial did, per writer, and the counts the row sums."""

    plan: RacePlan
    variant: str
    seed: int
    results: list[dict[str, Any]]
    temps_left: list[str]
    choices: list[int] = field(default_factory=list)
    digest: str = ""

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

    def replay_line(self) -> str:
        return (f"from scenarios.cas import *; from simfs import *; check_race(run_race("
                f"{self.plan!r}, {self.variant!r}, seed={self.seed}, chooser={self.choices!r}))")


class CasInvariantViolated(AssertionError):
    """A race collided on a temp, served corrupt bytes, failed a writer or left a temp."""

    def __init__(self, run: RaceRun, kinds: Sequence[str] = ()) -> None:
        self.run = run
        self.kinds = tuple(kinds) or PROBLEM_KINDS
        super().__init__(f"variant {run.variant!r}, {len(run.plan.writers)} writers: "
                         + "; ".join(run.problems(self.kinds))
                         + f"\nplan: {run.plan!r}\nreplay: python -c {run.replay_line()!r}")


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
    finally:
        digest = session.close()
    run.seed, run.choices, run.digest = seed, session.world.choices, digest
    return run


def check_race(run: RaceRun, kinds: Sequence[str] = PROBLEM_KINDS) -> None:
    """Raises: CasInvariantViolated (problems of ``kinds``), with the plan and a replay line."""
    if run.problems(kinds):
        raise CasInvariantViolated(run, kinds)


# -- the scenario ---------------------------------------------------------------------------


class Cas(Scenario):
    name: ClassVar[str] = "cas"
    seed_file: ClassVar[str] = "004_6169f0cbb31457c7.txt"
    summary: ClassVar[str] = ("a CAS root shared by pods: fixed .part/.building names collide, "
                              "size-only reuse serves corrupt bytes; fix: unique temps, "
                              "verify once per process, age-based sweep")
    has_trials: ClassVar[bool] = True
    params: ClassVar[tuple[Param, ...]] = (
        Param("trials", 20, "race trials per variant", int, minimum=1),
        Param("writers", 4, "writer pods in a race, alternating over two hosts", int,
              minimum=2),
        Param("stagger_s", 1.0, "race: writers ask within this many seconds", float,
              minimum=0.0),
        Param("stale_after", 21600.0, "crash-sweep: the boot sweep's age (seed: 6 h)", float,
              minimum=1.0),
        Param("chunk_s", 10.0, "crash-sweep: seconds per downloaded chunk", float,
              minimum=0.0),
    )
    variants: ClassVar[tuple[Variant, ...]] = (
        Variant("seed", "the seed's code before its PR: fixed .part/.building, size-only "
                        "reuse, no boot sweep, orphan sweep takes temps", buggy=True),
        Variant("reference", "reference.cas.CasStore: writer-unique temps, link() publish, "
                             "verify once per process, age-based sweeps", buggy=False),
    )

    def run(self, backend: Backend, seed: int, params: dict[str, Any],
            progress: Progress) -> ScenarioResult:
        rows: list[dict[str, Any]] = []
        samples: dict[str, Any] = {}
        digests: list[str] = []
        for number, variant in enumerate(self.variants):
            progress(f"cas: race, {variant.name}")
            rows.append(self._race(backend, seed * 10 + number, variant.name, params,
                                   digests, samples))
        for number, variant in enumerate(self.variants):
            progress(f"cas: seed-test, {variant.name}")
            rows.append(self._seed_test(backend, seed * 10 + 4 + number, variant.name,
                                        digests, samples))
        for number, variant in enumerate(self.variants):
            progress(f"cas: crash-sweep, {variant.name}")
            rows.append(self._crash_sweep(backend, seed * 10 + 7 + number, variant.name,
                                          params, digests, samples))
        return ScenarioResult(self.name, backend.name, seed, dict(params), rows,
                              combine_digests(digests), samples)

    def _race(self, backend: Backend, seed: int, variant: str, params: dict[str, Any],
              digests: list[str], samples: dict[str, Any]) -> dict[str, Any]:
        session = backend.session(dict.fromkeys(HOSTS, MOUNT), seed=seed)
        runs = []
        try:
            for trial in range(params["trials"]):
                # The same plans for both variants: a paired comparison.
                plan = RacePlan.draw(random.Random(f"cas:{seed // 10}:race:{trial}"),
                                     params["writers"], params["stagger_s"])
                runs.append(race_on(session, plan, variant, f"cas/race.{variant}.{trial}"))
        finally:
            digests.append(session.close())
        samples[f"race/{variant}"] = {
            "problems": [run.problems() for run in runs],
            "ensure_s": [result["ensure_s"] for run in runs for result in run.results
                         if result["ensure_s"] is not None]}
        return {"experiment": "race", "variant": variant, "writers": params["writers"],
                "trials": params["trials"],
                "corrupt_served": sum(run.corrupt_served for run in runs),
                "collisions": sum(run.collisions for run in runs),
                "failed": sum(run.failed for run in runs),
                "orphans_left": sum(len(run.temps_left) for run in runs),
                "wrongly_swept": 0, "repaired": "",
                "blake3_passes": max(run.blake3_passes for run in runs)}

    def _seed_test(self, backend: Backend, seed: int, variant: str, digests: list[str],
                   samples: dict[str, Any]) -> dict[str, Any]:
        files = sim.model_files(4, 4096)
        directory = f"cas/seed-test.{variant}"
        session = backend.session(dict.fromkeys(HOSTS, MOUNT), seed=seed)
        try:
            session.run([ProcessSpec(HOSTS[0], sim.prepare, (directory,), "prepare")],
                        timeout=60)
            session.run([ProcessSpec(HOSTS[0], sim.plant_corrupt_tree, (directory, files, KEY),
                                     "another-pod")], timeout=60)
            (checked,) = session.run([ProcessSpec(HOSTS[1], sim.check_unseen_ref,
                                                  (directory, variant, files, KEY),
                                                  "unseen-ref")], timeout=60)
        finally:
            digests.append(session.close())
        samples[f"seed-test/{variant}"] = checked
        return {"experiment": "seed-test", "variant": variant, "writers": 1, "trials": 1,
                "corrupt_served": checked["corrupt"], "collisions": 0,
                "failed": int(checked["error"] is not None), "orphans_left": 0,
                "wrongly_swept": 0, "repaired": "yes" if checked["repaired"] else "no",
                "blake3_passes": checked["max_passes"]}

    def _crash_sweep(self, backend: Backend, seed: int, variant: str, params: dict[str, Any],
                     digests: list[str], samples: dict[str, Any]) -> dict[str, Any]:
        stale, chunk_s = params["stale_after"], params["chunk_s"]
        chunks, chunk = 8, 4096
        crash_at = 3.5 * chunk_s
        dead = sim.model_files(chunks, chunk, "dead")
        live = sim.model_files(chunks, chunk, "live")
        directory = f"cas/crash-sweep.{variant}"
        hosts = dict.fromkeys(HOSTS, MOUNT)
        if backend.name == "sim":
            from ._sim import SimSession

            session: Session = SimSession(hosts, seed, faults=FaultPlan(
                crashes=(HostCrash(HOSTS[0], crash_at),)))
            exit_after: int | None = None
        else:
            session = backend.session(hosts, seed=seed)
            exit_after = 3
        try:
            try:
                session.run([ProcessSpec(HOSTS[0], sim.crashing_writer,
                                         (directory, variant, dead, "dead", chunk, chunk_s,
                                          exit_after), "dies")],
                            timeout=crash_at + 2 * chunk_s)
            except Exception as error:  # the writer's death: HostCrash, or os._exit
                crashed = f"{type(error).__name__}: {error}"
            else:
                crashed = "no"
            heartbeat = min(60.0, stale / 4)
            download_s = (chunks + 2) * chunk_s
            live_result, boot = session.run([
                ProcessSpec(HOSTS[1], sim.live_writer,
                            (directory, variant, live, "live", stale, chunk, chunk_s,
                             heartbeat), "live-writer"),
                ProcessSpec(HOSTS[1], sim.booting_pod,
                            (directory, variant, stale + download_s / 2, stale), "next-boot"),
            ], timeout=stale + 2 * download_s + 60)
        finally:
            digests.append(session.close())
        live_temps = sim.temp_names(live_result["journal"])
        samples[f"crash-sweep/{variant}"] = {"crashed": crashed, "live": live_result,
                                             "boot": boot}
        wrongly = len(live_temps & set(boot["swept"] + [f"blobs/{name}" for name in
                                                        boot["orphans_removed"]]))
        return {"experiment": "crash-sweep", "variant": variant, "writers": 2, "trials": 1,
                "corrupt_served": live_result["corrupt"], "collisions": 0,
                "failed": int(live_result["error"] is not None),
                "orphans_left": len(set(boot["temps_left"]) - live_temps),
                "wrongly_swept": wrongly, "repaired": "", "blake3_passes": 0}

    def table(self, result: ScenarioResult) -> str:
        params = result.params
        lines = [
            f"cas (seed {self.seed_file}): one CAS root shared by pods on two hosts; backend "
            f"{result.backend}",
            f"  race: {params['writers']} writers ensure one missing model within "
            f"{params['stagger_s']:g} s, {params['trials']} trials",
            "  seed-test: a corrupt right-size blob hard-linked into a tree, ensured by a "
            "process that never saw the ref",
            f"  crash-sweep: a writer dies mid-download; {params['stale_after']:g} s later a "
            "pod boots and sweeps while another downloads",
            "",
            format_table(("experiment", "variant", "writers", "trials", "corrupt served",
                          "collisions", "failed", "temps left", "live swept", "repaired",
                          "blake3 passes"),
                         [tuple(row[column] for column in COLUMNS) for row in result.rows]),
        ]
        return "\n".join(lines)

    def fidelity_key_names(self) -> tuple[str, ...]:
        return ("experiment", "variant")

    def fidelity_rows(self, result: ScenarioResult) -> list[FidelityRow]:
        """Per row, which failures showed, and (race) how long a writer took to get the model.

        The seed's failures in a race depend on timing, so its outcome may
        differ between backends from run to run; the reference's must be
        "clean" on both.
        """
        rows = []
        for row in result.rows:
            shown = [kind for kind, column in FAILURE_COLUMNS if row[column]]
            durations = sorted(result.samples.get(f"{row['experiment']}/{row['variant']}", {}
                                                  ).get("ensure_s", []) or [0.0])
            rows.append(FidelityRow((row["experiment"], row["variant"]),
                                    "+".join(shown) or "clean",
                                    durations[len(durations) // 2], durations[0],
                                    durations[-1], None))
        return rows

    def check(self, result: ScenarioResult) -> list[str]:
        """The reference is clean everywhere; the seed's code shows the failures it had."""
        problems = []
        rows = {(row["experiment"], row["variant"]): row for row in result.rows}
        for experiment in EXPERIMENTS:
            row = rows[(experiment, "reference")]
            bad = {column: row[column] for column in ("corrupt_served", "collisions", "failed",
                                                      "orphans_left", "wrongly_swept")
                   if row[column]}
            if bad:
                problems.append(f"{experiment}/reference: expected no failures; got {bad}")
        if rows[("seed-test", "reference")]["repaired"] != "yes":
            problems.append("seed-test/reference: the shared blob was not repaired")
        if rows[("seed-test", "reference")]["blake3_passes"] != 1:
            problems.append("seed-test/reference: expected exactly one verify pass per "
                            f"reused blob, got {rows[('seed-test', 'reference')]}")
        if not rows[("seed-test", "seed")]["corrupt_served"]:
            problems.append("seed-test/seed: expected the corrupt blob to be served")
        seed_race = rows[("race", "seed")]
        if result.params["writers"] >= 2 and not seed_race["collisions"]:
            problems.append(f"race/seed: expected collisions; got {seed_race}")
        return problems
