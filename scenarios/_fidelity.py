"""``python -m scenarios fidelity NAME``: the model and the kernel, side by side.

The scenario runs with the same parameters and seed on the simulation and
on real NFS mounts; each row compares the outcome, the delays and the RPCs
per poll (the model's counters against ``/proc/self/mountstats``).  A row is
flagged when the outcomes differ, or when its delay (the median of its
trials) differs by more than one poll interval *and* more than 10 %: the
tolerance of a poller's resolution.  Min and max are shown, not judged:
with the few trials a CI run affords they are single samples, and on a real
client each carries process start-up and scheduling jitter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._base import Backend, FidelityRow, Progress, Scenario, format_table

RELATIVE_TOLERANCE = 0.10


def _differs(sim: float, real: float, poll: float) -> bool:
    gap = abs(sim - real)
    return gap > poll and gap > RELATIVE_TOLERANCE * max(abs(sim), abs(real))


def compare(sim: Sequence[FidelityRow], real: Sequence[FidelityRow],
            poll: float) -> tuple[list[list[Any]], list[str]]:
    """Table rows and the reasons each flagged row was flagged."""
    real_by_key = {row.key: row for row in real}
    table: list[list[Any]] = []
    flags: list[str] = []
    for row in sim:
        other = real_by_key.get(row.key)
        if other is None:
            flags.append(f"{'/'.join(row.key)}: no real row")
            continue
        reasons = []
        if row.outcome != other.outcome:
            reasons.append(f"outcome {row.outcome} vs {other.outcome}")
        if (row.median_s is not None and other.median_s is not None
                and _differs(row.median_s, other.median_s, poll)):
            reasons.append(f"median {row.median_s:.2f} vs {other.median_s:.2f} s")
        if reasons:
            flags.append(f"{'/'.join(row.key)}: {'; '.join(reasons)}")
        table.append([*row.key, f"{row.outcome}/{other.outcome}",
                      _pair(row.median_s, other.median_s),
                      _pair(row.min_s, other.min_s),
                      _pair(row.max_s, other.max_s),
                      _rpcs(row.rpcs_per_poll, other.rpcs_per_poll),
                      "FLAGGED" if reasons else "agree"])
    return table, flags


def _pair(sim: float | None, real: float | None) -> str:
    """Two delays as sim/real; '-' for a side whose trials all timed out."""
    return "/".join("-" if value is None else f"{value:.2f}" for value in (sim, real))


def _rpcs(sim: float | None, real: float | None) -> str:
    if sim is None or real is None:
        return "-"
    return f"{sim:.2f}/{real:.2f}"


def run_fidelity(scenario: Scenario, sim: Backend, real: Backend, seed: int,
                 params: dict[str, Any], progress: Progress) -> tuple[str, list[str]]:
    """(the side-by-side table, flagged rows) for one scenario."""
    scenario.fidelity_key_names()  # raises for a scenario without a comparison
    progress(f"fidelity: {scenario.name} on the simulation")
    sim_result = scenario.run(sim, seed, params, progress)
    progress(f"fidelity: {scenario.name} on real NFS")
    real_result = scenario.run(real, seed, params, progress)
    poll = float(params.get("poll", 0.1))
    rows, flags = compare(scenario.fidelity_rows(sim_result),
                          scenario.fidelity_rows(real_result), poll)
    key_names = scenario.fidelity_key_names()
    headers = [*key_names, "outcome sim/real", "median", "min", "max", "RPCs/poll", "verdict"]
    title = (f"fidelity of {scenario.name}: sim/real with {params}, seed {seed}; flagged when "
             f"outcomes differ or the median delay differs by > {poll:g} s and > "
             f"{RELATIVE_TOLERANCE:.0%}")
    details = scenario.fidelity_details(sim_result, real_result)
    return title + "\n\n" + format_table(headers, rows) + "\n\n" + details, flags
