"""Seed 001: a shard marked HEALTHY by a refit that never sent it weights.

The window replay: one restart's reload lands in each of the seed's four
windows (W1 before the membership read, W2 during the communicator rebuild,
W3 during the transfer, W4 after the promotion), for each controller
variant, on the fleet simulator of ``scenarios._fleet_sim``:

- ``before``, the seed's code before its PR: promote every STALE shard.
- ``pr``, the seed's PR: promote the STALE shards in ``participants``,
  read a second time after the awaited rebuild, so W2 stays open.
- ``reference``, ``reference.fleet.RefitController``: one read feeds the
  rebuild, the transfer and the promotion.

The table is the seed's: for every window, in the communicator?, in
participants?, gets weights?, and the outcome per variant.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from reference.fleet import ShardId

from ._base import (
    Backend,
    Param,
    Progress,
    Scenario,
    ScenarioError,
    ScenarioResult,
    Variant,
    combine_digests,
    format_table,
)
from ._explore import Chooser, Exploration, Outcome
from ._fleet_sim import (
    SEED_TABLE,
    VARIANTS,
    WINDOW_LABELS,
    WINDOWS,
    FleetPlan,
    FleetRun,
    RefitInvariantViolated,
    RefitRecord,
    Restart,
    check_invariant,
    fleet_plans,
    plan_from_json,
    plan_to_json,
    run_fleet,
    run_fleet_on,
    tape_chooser,
)

__all__ = ["FleetPlan", "FleetRun", "Refit", "RefitInvariantViolated", "Restart",
           "check_invariant", "fleet_plans", "run_fleet", "tape_chooser", "window_plan"]

# -- the replay of the seed's four windows ----------------------------------------------------


def window_plan(window: str, params: dict[str, Any], rng: random.Random) -> FleetPlan:
    """One refit (and a follow-up) with shard ``shard``'s reload landing in ``window``.

    On the main path the shard died before the refit; on the recovery path
    its exit mid-transfer is what fails the first attempt, and the windows
    are those of the recovery re-snapshot (seed 001: the likelier one).

    Raises:
        ScenarioError: no exit time gives a reload in the allowed range.
    """
    start, rebuild, transfer = params["refit_at"], params["rebuild_s"], params["transfer_s"]
    backoff = params["backoff_s"]
    if params["path"] == "main":
        read, exits = start, (1.0, start - 1.0)
        earliest = 0.0
    else:
        read = start + rebuild + transfer + backoff
        exits = (start + rebuild + 0.1 * transfer, start + rebuild + 0.9 * transfer)
        earliest = start + rebuild + transfer
    promoted = read + rebuild + transfer
    low, high = {"W1": (max(earliest, read - 120.0), read), "W2": (read, read + rebuild),
                 "W3": (read + rebuild, promoted), "W4": (promoted, promoted + 120.0)}[window]
    lands = low + (high - low) * rng.uniform(0.1, 0.9)
    first = max(exits[0], lands - params["max_reload_s"])
    last = min(exits[1], lands - params["min_reload_s"])
    if first > last:
        raise ScenarioError(
            f"{window} ({params['path']} path): no exit time in {exits[0]:g}-{exits[1]:g} s "
            f"gives a reload of {params['min_reload_s']:g}-{params['max_reload_s']:g} s "
            f"landing at {lands:.1f} s; raise refit_at or widen the reload range")
    exit_at = rng.uniform(first, last)
    follow_up = start + params["next_refit_s"]
    if follow_up <= high:
        raise ScenarioError(f"next_refit_s={params['next_refit_s']:g} starts the next refit "
                            f"before {window} closes at {high:.0f} s")
    return FleetPlan(params["shards"], (start, follow_up), rebuild, transfer,
                     (Restart(params["shard"], exit_at, lands - exit_at),), backoff)


# -- what may vary, for `python -m scenarios explore refit` ------------------------------------


def _explore_space() -> Any:
    """Fleets, their refit times and restarts (``fleet_plans``), as JSON."""
    return fleet_plans().map(plan_to_json)


def _explore_example(variant: str, example: dict[str, Any], seed: int,
                     chooser: Chooser) -> Outcome:
    """One fleet; the invariant: no shard HEALTHY without the refit's weights."""
    run = run_fleet(plan_from_json(example), variant, seed=seed, chooser=chooser)
    last = max((mark.at for mark in run.fleet.marks), default=0.0)
    reached = (*run.landing_windows(),
               *("recovery" for record in run.records if record.attempts > 1))
    return Outcome(tuple(v.describe() for v in run.violations), run.digest, last,
                   tuple(run.choices), reached)


def _outcome(shard: ShardId, record: RefitRecord) -> str:
    if shard in record.promoted:
        return "correct" if shard in record.delivered else "promoted"
    return "skipped" if shard in record.stale_left else "correct"


class Refit(Scenario):
    name: ClassVar[str] = "refit"
    seed_file: ClassVar[str] = "001_d951bc9dc4148fe7.txt"
    summary: ClassVar[str] = ("a shard promoted by a refit that never sent it weights; "
                              "fix: one membership read feeds rebuild and promotion")
    params: ClassVar[tuple[Param, ...]] = (
        Param("shards", 4, "generation shards in the fleet", int, minimum=2),
        Param("shard", 2, "the shard that restarts (seed: shard 2)", int, minimum=0),
        Param("refit_at", 900.0, "virtual seconds at which the refit starts", minimum=0.0),
        Param("rebuild_s", 30.0, "seconds the communicator rebuild takes", minimum=1.0),
        Param("transfer_s", 90.0, "seconds the weight transfer takes", minimum=1.0),
        Param("min_reload_s", 60.0, "shortest reload of a restarted shard", minimum=0.0),
        Param("max_reload_s", 600.0, "longest reload of a restarted shard", minimum=0.0),
        Param("backoff_s", 300.0, "seconds before a recovery re-snapshot", minimum=0.0),
        Param("next_refit_s", 1800.0, "seconds from the refit to the next one", minimum=1.0),
        Param("path", "main", "which re-snapshot the windows belong to", str,
              choices=("main", "recovery")),
    )
    variants: ClassVar[tuple[Variant, ...]] = (
        Variant("before", "the seed's code before its PR: promote every STALE shard", True),
        Variant("pr", "the seed's PR: participants from a second read after the rebuild",
                True),
        Variant("reference", "reference.fleet.RefitController: one read feeds all", False),
    )
    exploration: ClassVar[Exploration] = Exploration(_explore_space, _explore_example,
                                                     max_deviations=8)

    def run(self, backend: Backend, seed: int, params: dict[str, Any],
            progress: Progress) -> ScenarioResult:
        if backend.name != "sim":
            raise ScenarioError("the refit scenario has no filesystem component to run on "
                                "real NFS; run it with --backend sim")
        if params["shard"] >= params["shards"]:
            raise ScenarioError(f"parameter shard={params['shard']}: shards are "
                                f"0..{params['shards'] - 1}")
        if params["max_reload_s"] < params["min_reload_s"]:
            raise ScenarioError(f"max_reload_s={params['max_reload_s']:g} is below "
                                f"min_reload_s={params['min_reload_s']:g}")
        rows: list[dict[str, Any]] = []
        samples: dict[str, Any] = {}
        digests: list[str] = []
        shard = params["shard"]
        for index, window in enumerate(WINDOWS):
            plan = window_plan(window, params, random.Random(f"refit:{seed}:{window}"))
            progress(f"refit: {window}, shard {shard} exits at "
                     f"{plan.restarts[0].exits_at:.1f} s, lands at "
                     f"{plan.restarts[0].lands_at:.1f} s")
            for number, variant in enumerate(VARIANTS):
                run = run_fleet_on(backend, plan, variant, seed * 100 + index * 10 + number)
                digests.append(run.digest)
                record = run.records[0]
                rows.append({"window": window, "variant": variant,
                             "in_communicator": shard in record.communicator,
                             "in_participants": shard in record.participants,
                             "gets_weights": shard in record.delivered,
                             "outcome": _outcome(shard, record)})
                landing = run.fleet.landing(shard)
                last = run.records[-1]
                samples[f"{window}/{variant}"] = {
                    "exits_at": plan.restarts[0].exits_at,
                    "lands_at": plan.restarts[0].lands_at,
                    "landed_in": None if landing is None else run.fleet.window_of(landing,
                                                                                  record),
                    "attempts": record.attempts,
                    "violations": [v.describe() for v in run.violations],
                    "all_current_after_next_refit": (
                        not last.failed and len(last.serving) == plan.shards
                        and set(last.holds) == {last.version}),
                }
        return ScenarioResult(self.name, backend.name, seed, dict(params), rows,
                              combine_digests(digests), samples)

    def table(self, result: ScenarioResult) -> str:
        params = result.params
        yes = {True: "yes", False: "no"}
        by_key = {(row["window"], row["variant"]): row for row in result.rows}
        lines = [f"refit (seed {self.seed_file}): {params['shards']} shards; shard "
                 f"{params['shard']}'s reload lands in each window of the refit at "
                 f"{params['refit_at']:g} s (rebuild {params['rebuild_s']:g} s, transfer "
                 f"{params['transfer_s']:g} s; {params['path']} path); backend "
                 f"{result.backend}", ""]
        table = []
        for window in WINDOWS:
            pr = by_key[(window, "pr")]
            table.append((WINDOW_LABELS[window], yes[pr["in_communicator"]],
                          yes[pr["in_participants"]], yes[pr["gets_weights"]],
                          *(by_key[(window, v)]["outcome"] for v in VARIANTS)))
        lines.append(format_table(("The reload finishes...", "In the communicator?",
                                   "In participants?", "Gets weights?", "Before",
                                   "After this PR", "With the fix"), table))
        lines.append("")
        lines.append("In participants? is the PR's second read, as in the seed; per variant:")
        for variant in VARIANTS:
            answers = ", ".join(f"{w} {yes[by_key[(w, variant)]['in_participants']]}"
                                for w in WINDOWS)
            lines.append(f"  {variant:9}  {answers}")
        lines.append("  (before: every shard is a candidate; the reference: the set the "
                     "communicator was built over)")
        return "\n".join(lines)

    def check(self, result: ScenarioResult) -> list[str]:
        """The seed's table, reproduced; the reference promotes nobody without weights."""
        problems = []
        for row in result.rows:
            window, variant = row["window"], row["variant"]
            communicator, participants, weights, outcomes = SEED_TABLE[window]
            expected = {"in_communicator": communicator, "gets_weights": weights,
                        "outcome": outcomes[VARIANTS.index(variant)]}
            if variant == "pr":
                expected["in_participants"] = participants
            for key, value in expected.items():
                if row[key] != value:
                    problems.append(f"{window}/{variant}: {key} is {row[key]!r}; the seed's "
                                    f"table says {value!r}")
        for key, sample in result.samples.items():
            window, variant = key.split("/")
            if sample["landed_in"] != window:
                problems.append(f"{key}: the reload landed in {sample['landed_in']}")
            if variant == "reference" and sample["violations"]:
                problems.append(f"{key}: {'; '.join(sample['violations'])}")
            if variant == "reference" and not sample["all_current_after_next_refit"]:
                problems.append(f"{key}: the next refit left a shard STALE or behind")
        return problems
