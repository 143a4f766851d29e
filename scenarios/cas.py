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
- ``gc-open``: a size-capped collection on one host evicts an old snapshot
  whose blob a pod on the same host still reads (its unlink becomes a
  ``.nfsXXXX`` silly rename, docs/design.md, "The NFS model"), beside a live
  snapshot a pod on the other host reads (removing it would give that reader
  ESTALE).  The collection's orphan sweep must leave the ``.nfs`` entry alone:
  unlinking it while open fails EBUSY.

On real mounts (``--backend real``, e.g. the VM runner with hosts
``pod-a`` and ``pod-b``) pass a short ``stale_after`` (``--param
stale_after=20 --param chunk_s=1``): the crash-sweep waits that long in real
time, and its writer dies by ``os._exit`` after three chunks.  Measured so in
the VM (Linux 6.1 NFSv3, 2 race trials): the seed's code 6 collisions, 6
failed writers and 1 corrupt read in the race, the reference none; the other
rows as in the simulation.

Variants: ``seed`` (``scenarios._cas_sim.SeedStore``: the code before the
seed's PR) and ``reference`` (``reference.cas.CasStore``).

Row columns: ``corrupt_served`` reads that returned bytes whose BLAKE3
differs from the manifest; ``collisions`` pairs of writers that had one temp
name open at once; ``failed`` writers that raised; ``orphans_left`` temps
left after the trial (crash-sweep: after the boot sweep, the live writer's
excepted; gc-open: ``.nfs`` entries and evicted trees left once the
readers closed and the next collection ran); ``wrongly_swept`` live temps a
sweep removed (gc-open: the live snapshot evicted); ``blake3_passes``
the most verify passes one process made over one digest's reused bytes
(the reference: exactly 1 wherever it reused bytes; the seed: 0).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from reference.cas import manifest_for
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
from ._cas_race import (
    PROBLEM_KINDS,
    CasInvariantViolated,
    RaceRun,
    check_race,
    count_collisions,
    list_temps,
    race_on,
    run_race,
)
from ._cas_sim import HOSTS, KEY, MOUNT
from ._explore import Chooser, Exploration, Outcome

EXPERIMENTS = ("race", "seed-test", "crash-sweep", "gc-open")
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


def race_plans(*, stale_blob: bool | None = None) -> Any:
    """The Hypothesis strategy over ``RacePlan``s: 1-4 writers, starts on a 50 ms grid.

    Args:
        stale_blob: whether the volume starts with a corrupt right-size blob
            of the weights; None: drawn.
    """
    from hypothesis import strategies as st

    writer = st.builds(Writer, st.sampled_from(HOSTS),
                       st.integers(0, 20).map(lambda step: round(step * 0.05, 2)),
                       st.sampled_from(CHUNK_TIMES))
    return st.builds(RacePlan, st.lists(writer, min_size=1, max_size=4).map(tuple),
                     st.integers(1, 4), st.just(4096),
                     st.booleans() if stale_blob is None else st.just(stale_blob))


def plan_to_json(plan: RacePlan) -> dict[str, Any]:
    """A race as the JSON an exploration example and its replay token carry."""
    return {"writers": [{"host": w.host, "start_s": w.start_s, "chunk_s": w.chunk_s}
                        for w in plan.writers],
            "chunks": plan.chunks, "chunk": plan.chunk, "stale_blob": plan.stale_blob}


def plan_from_json(example: dict[str, Any]) -> RacePlan:
    """Raises: ValueError, naming what the race cannot have (``RacePlan``)."""
    return RacePlan(tuple(Writer(w["host"], w["start_s"], w["chunk_s"])
                          for w in example["writers"]),
                    example["chunks"], example["chunk"], example["stale_blob"])


def explore_space(*, stale_blob: bool | None = None) -> Any:
    """Races (``race_plans``), as JSON: what ``python -m scenarios explore cas`` varies
    (``stale_blob=None``); a search for one of the seed's two bugs fixes it."""
    return race_plans(stale_blob=stale_blob).map(plan_to_json)


def _writers_overlap(run: RaceRun) -> bool:
    """Whether two writers were downloading at the same time (the race was real)."""
    spans = []
    for result in run.results:
        stamps = [stamp for _, _, stamp in result["journal"]]
        if stamps:
            spans.append((min(stamps), max(stamps)))
    return any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans)
               for b in spans[i + 1:])


def _explore_example(variant: str, example: dict[str, Any], seed: int,
                     chooser: Chooser) -> Outcome:
    """One race in a fresh world; the invariants (``check_race``): no two writers hold
    one temp name at once, no read returns bytes whose BLAKE3 differs from the
    manifest, no writer fails, no temp is left."""
    run = run_race(plan_from_json(example), variant, seed=seed, chooser=chooser)
    reached = [*(["stale blob"] if run.plan.stale_blob else []),
               *(["overlapping"] if _writers_overlap(run) else []),
               *(["lost race"] if any(r["lost_races"] for r in run.results) else []),
               *(["quarantined"] if any(r["quarantined"] for r in run.results) else [])]
    return Outcome(tuple(run.problems()), run.digest, run.virtual_s, tuple(run.choices),
                   tuple(reached))


# -- the scenario ---------------------------------------------------------------------------


__all__ = ["PROBLEM_KINDS", "Cas", "CasInvariantViolated", "RacePlan", "RaceRun", "Writer",
           "check_race", "count_collisions", "explore_space", "list_temps", "plan_from_json",
           "plan_to_json", "race_on", "race_plans", "run_race"]


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
    exploration: ClassVar[Exploration] = Exploration(explore_space, _explore_example,
                                                     max_deviations=8)

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
        for number, variant in enumerate(self.variants):
            progress(f"cas: gc-open, {variant.name}")
            rows.append(self._gc_open(backend, seed * 100 + 50 + number, variant.name,
                                      digests, samples))
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
            from ._sim import SimBackend

            assert isinstance(backend, SimBackend)
            session: Session = backend.session_with(hosts, seed, faults=FaultPlan(
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

    def _gc_open(self, backend: Backend, seed: int, variant: str, digests: list[str],
                 samples: dict[str, Any]) -> dict[str, Any]:
        """Collect an old snapshot a reader on the same host still reads, beside a live one."""
        old, live = sim.model_files(8, 4096, "old"), sim.model_files(8, 4096, "live")
        live_bytes = sum(entry.size for entry in manifest_for("live", live).entries)
        directory = f"cas/gc-open.{variant}"
        session = backend.session(dict.fromkeys(HOSTS, MOUNT), seed=seed)
        try:
            session.run([ProcessSpec(HOSTS[0], sim.two_snapshots, (directory, old, live),
                                     "setup")], timeout=60)
            old_reader, live_reader, gc = session.run([
                ProcessSpec(HOSTS[0], sim.slow_reader, (directory, "old", old, 4096, 1.0, True),
                            "old-reader"),
                ProcessSpec(HOSTS[1], sim.slow_reader, (directory, "live", live, 4096, 1.0, False),
                            "live-reader"),
                ProcessSpec(HOSTS[0], sim.collect, (directory, variant, 2.0, live_bytes),
                            "collector"),
            ], timeout=120)
            (left,) = session.run([ProcessSpec(HOSTS[0], sim.leftovers, (directory, variant),
                                               "next-collection")], timeout=60)
        finally:
            digests.append(session.close())
        samples[f"gc-open/{variant}"] = {"old_reader": old_reader, "live_reader": live_reader,
                                         "gc": gc, "left": left}
        readers = (old_reader, live_reader)
        return {"experiment": "gc-open", "variant": variant, "writers": 1, "trials": 1,
                "corrupt_served": sum(reader["corrupt"] for reader in readers),
                "collisions": 0,
                "failed": sum(part["error"] is not None for part in (*readers, gc)),
                "orphans_left": len(left["left"]),
                "wrongly_swept": int("live" in gc["evicted"] or "live" not in left["snapshots"]),
                "repaired": "", "blake3_passes": 0}

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
            "  gc-open: a size-capped collection evicts a snapshot whose blob a pod on its host "
            "still reads (.nfs silly rename), beside a live one read from the other host",
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
        if not rows[("gc-open", "seed")]["failed"]:
            problems.append("gc-open/seed: expected its orphan sweep to fail EBUSY on the .nfs "
                            "entry")
        seed_race = rows[("race", "seed")]
        if result.params["writers"] >= 2 and not seed_race["collisions"]:
            problems.append(f"race/seed: expected collisions; got {seed_race}")
        return problems
