"""Seed 003: parallel transfers that depend on each other's directories.

The seed ran five transfers at once to a host 240 ms away: tokenized data
(tar), the weights (tar, whose remote side ran ``mkdir -p
models/Qwen3.6-27B-DFlash``), the config (``cat > models/.../config.json``),
a repository clone and a frequency file (scp).  When the config's pipe
opened its file before the weights' pipe made the directory, it failed with
ENOENT; the fix re-ran it once the weights were done and checked sizes with
``ls -lh``.  The destination here is a tree shared over NFS by three hosts:

- ``receiver``: where the seed's ssh sessions land (the seed's UK host);
- ``second``: another client of the export, where the config's pipe and its
  retry land in the ``other`` rows;
- ``consumer``: the trainer, which watches the final names during the
  transfers (a torn file visible under its final name) and checks every
  file at the end (``reference.transfer.verify``).

Variants (rows; ``retry_host`` says where the config transfer and its retry
run, relative to the host that makes the directory):

- ``naive``: the seed's parallel run, no retry.
- ``seed-fix``: the seed's run, then the config's pipe once more when it
  failed, after all the others are done; on the ``same`` host (the seed) or
  on the ``other``.  From the other host, a retry within acdirmin of its
  failed lookup meets its own cached negative entry: ENOENT although the
  directory is on the server (docs/nfs-facts.md, "Attribute and dentry caches";
  the NFS model, not this module, decides that).
- ``reference``: ``reference.transfer.transfer_all``: explicit parents,
  writer-unique temps renamed into place, bounded retries.

Measured on real NFS (``compose/vm.py``: Linux 6.1 client and knfsd, three
``nosharecache`` mounts; ``--backend real --trials 1 --seed 13 --param
rtt_s=1.0 --param rtt_jitter=0.9 --param bandwidth=1e10``): naive ENOENT;
the seed's retry completes on the same host and meets a stale ENOENT from
the other; the reference completes on both, nothing torn; as the
simulation with the same arguments (which also saw the naive weights torn,
a 0.33 s write between the consumer's 2 s polls).

The link model: a pipe's remote end starts ``handshake_rtts`` round trips
after the shell started it (ssh set-up), each round trip ``rtt_s`` give or
take ``rtt_jitter``; the shell starts the pipes ``launch_stagger_s`` apart in
the seed's order; a file takes its size over ``bandwidth`` seconds.  With a
long RTT the set-up jitter outweighs the stagger and the config's pipe often
wins the race; with a short one the weights' pipe, started first, is first.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Any, ClassVar

from ._base import (
    Backend,
    FidelityRow,
    Param,
    ProcessSpec,
    Progress,
    Scenario,
    ScenarioError,
    ScenarioResult,
    Variant,
    combine_digests,
    format_table,
)
from ._explore import Chooser, Exploration, Outcome
from ._transfer_sim import (
    BASE,
    HOSTS,
    SEED_TRANSFERS,
    TRANSFERS,
    TransferInvariantViolated,
    TrialRun,
    check_trial,
    clear_base,
    file_seconds,
    run_trial,
    run_trial_in,
)

__all__ = [
    "TRANSFERS",
    "TransferInvariantViolated",
    "TransferSeed",
    "TrialPlan",
    "TrialRun",
    "check_trial",
    "explore_space",
    "link_plan",
    "plan_from_json",
    "plan_to_json",
    "run_trial",
    "trial_plans",
]

RETRY_HOSTS = {"same": "receiver", "other": "second"}
GROUPS = (("naive", "none"), ("seed-fix", "same"), ("seed-fix", "other"),
          ("reference", "same"), ("reference", "other"))
# The tree is made a second before the pipes start by default: the seed made
# it in an earlier command, and a directory made moments before a lookup
# follows a rule of its own (docs/nfs-facts.md, "Attribute and dentry caches",
# last measured case) that is not this seed's.
PREPARE_GAP_S = 1.0


# -- what may vary in one trial -----------------------------------------------------------


@dataclass(frozen=True)
class TrialPlan:
    """Everything that varies between trials: which transfers, the link's delays, hosts.

    Args:
        transfers: which of the seed's five transfers run, in the seed's order.
        opens_at: per transfer, seconds from the shell starting the pipes
            until its remote end starts writing (its ssh session is up).
        retry_opens_at: the same for the seed's retry, from when it starts.
        launch_s: seconds from the trial's start (the tree just made) to the
            shell starting the pipes.
        bandwidth: bytes per second one stream carries.
        config_host: ``receiver`` or ``second``: where the config's transfer
            (and the seed's retry of it) runs.
        watch_poll: seconds between the consumer's looks at the final names;
            None: nobody watches.

    Raises:
        ValueError: naming the field and what it must be.
    """

    transfers: tuple[str, ...]
    opens_at: tuple[float, ...]
    retry_opens_at: float
    bandwidth: float
    config_host: str = "receiver"
    watch_poll: float | None = 1.0
    launch_s: float = PREPARE_GAP_S

    def __post_init__(self) -> None:
        unknown = [name for name in self.transfers if name not in TRANSFERS]
        if unknown or list(self.transfers) != sorted(set(self.transfers), key=TRANSFERS.index):
            raise ValueError(f"transfers must be distinct names of {TRANSFERS} in that "
                             f"order, not {self.transfers!r}")
        if len(self.opens_at) != len(self.transfers) or any(t < 0 for t in self.opens_at):
            raise ValueError(f"opens_at needs one time >= 0 per transfer, not "
                             f"{self.opens_at!r}")
        if self.retry_opens_at < 0 or self.launch_s < 0:
            raise ValueError(f"retry_opens_at and launch_s must be >= 0, not "
                             f"{self.retry_opens_at!r} and {self.launch_s!r}")
        if self.bandwidth <= 0:
            raise ValueError(f"bandwidth must be > 0 bytes/s, not {self.bandwidth!r}")
        if self.config_host not in RETRY_HOSTS.values():
            raise ValueError(f"config_host must be one of {sorted(RETRY_HOSTS.values())}, "
                             f"not {self.config_host!r}")
        if self.watch_poll is not None and self.watch_poll <= 0:
            raise ValueError(f"watch_poll must be > 0 seconds or None, not {self.watch_poll!r}")

    def host_of(self, name: str) -> str:
        return self.config_host if name == "config" else "receiver"

    def seconds(self, name: str) -> float:
        """When transfer ``name`` would be done, undisturbed, from the shell's start."""
        opens = self.opens_at[self.transfers.index(name)]
        return opens + sum(file_seconds(size, self.bandwidth)
                           for _, size in SEED_TRANSFERS[name])

    def opens_from_start(self, name: str) -> float:
        """When ``name``'s remote end starts writing, from the trial's start."""
        return self.launch_s + self.opens_at[self.transfers.index(name)]

    @property
    def horizon(self) -> float:
        """Seconds from the trial's start by which every transfer is done, undisturbed."""
        return self.launch_s + max((self.seconds(name) for name in self.transfers),
                                   default=0.0)


def link_plan(rng: random.Random, params: dict[str, Any], config_host: str = "receiver"
              ) -> TrialPlan:
    """One trial of the seed's five transfers over the link ``params`` describe."""

    def session_up(started: float) -> float:
        trips = sum(params["rtt_s"] * rng.uniform(1 - params["rtt_jitter"],
                                                  1 + params["rtt_jitter"])
                    for _ in range(params["handshake_rtts"]))
        return float(started + trips)

    opens = tuple(session_up(index * params["launch_stagger_s"])
                  for index in range(len(TRANSFERS)))
    return TrialPlan(TRANSFERS, opens, session_up(0.0), params["bandwidth"], config_host,
                     params["watch_poll"], params["prepare_gap_s"])


GRID_S = 0.01
WATCH_POLLS = (None, 1.0, 0.5)


def trial_plans(*, watch: bool | None = None) -> Any:
    """A Hypothesis strategy of trials: a subset of the transfers, delays on a grid.

    The config's pipe presumes the directory the weights' pipe makes (the
    seed's hidden dependency), so a plan with the config has the weights.
    Session set-ups are 0-1 s on a 10 ms grid, so two pipes opening at the
    same instant is common and the schedule decides which goes first.  The
    weights take 0.33 s or 3.3 s (the consumer's polls over the transfer are
    most of an example's cost; the seed's 26.4 s adds polls, not cases).

    Args:
        watch: whether the consumer watches the final names (every 1 or
            0.5 s); None: drawn, nobody watching included.  Unwatched, the
            naive variant's first failure is the seed's ENOENT: a search for
            it narrows to ``watch=False``, since a search that may watch
            shrinks to the simpler torn sighting of one file.
    """
    from hypothesis import strategies as st

    @st.composite
    def plans(draw: st.DrawFn) -> TrialPlan:
        polls = WATCH_POLLS if watch is None else WATCH_POLLS[1:] if watch else (None,)
        poll = draw(st.sampled_from(polls))
        chosen = [name for name in TRANSFERS if draw(st.booleans())]
        if "config" in chosen and "weights" not in chosen:
            chosen = sorted({*chosen, "weights"}, key=TRANSFERS.index)
        opens = tuple(GRID_S * draw(st.integers(0, 100)) for _ in chosen)
        retry = GRID_S * draw(st.integers(0, 100))
        bandwidth = draw(st.sampled_from((1e10, 1e9)))
        host = draw(st.sampled_from(("receiver", "second")))
        return TrialPlan(tuple(chosen), opens, retry, bandwidth, host, poll)

    return plans()


def plan_to_json(plan: TrialPlan) -> dict[str, Any]:
    """A trial as the JSON an exploration example and its replay token carry."""
    return {"watch_poll": plan.watch_poll, "transfers": list(plan.transfers),
            "opens_at": list(plan.opens_at), "retry_opens_at": plan.retry_opens_at,
            "bandwidth": plan.bandwidth, "config_host": plan.config_host}


def plan_from_json(example: dict[str, Any]) -> TrialPlan:
    """Raises: ValueError, naming a field the trial cannot have (``TrialPlan``)."""
    return TrialPlan(tuple(example["transfers"]), tuple(example["opens_at"]),
                     example["retry_opens_at"], example["bandwidth"], example["config_host"],
                     example["watch_poll"])


def explore_space(*, watch: bool | None = None) -> Any:
    """Trials (``trial_plans``), as JSON: what ``python -m scenarios explore transfer``
    varies (``watch=None``); a narrower search passes ``watch``."""
    return trial_plans(watch=watch).map(plan_to_json)


def _explore_example(variant: str, example: dict[str, Any], seed: int,
                     chooser: Chooser) -> Outcome:
    """One trial in a fresh world; the invariant (``check_trial``): no ENOENT, no stale
    ENOENT, nothing torn under a final name, every file in place at the end."""
    plan = plan_from_json(example)
    run = run_trial(plan, variant, seed=seed, chooser=chooser)
    try:
        check_trial(run)
        problems: tuple[str, ...] = ()
    except TransferInvariantViolated as violation:
        problems = (violation.problem,)
    reached = []
    if "config" in plan.transfers:
        opens = dict(zip(plan.transfers, plan.opens_at))
        if opens["config"] <= opens["weights"]:
            reached.append("config opened first or tied")  # the naive variant's lost race
        if plan.config_host == "second":
            reached.append("config on the second host")
    if plan.watch_poll is not None:
        reached.append("watched")
    return Outcome(problems, run.digest, run.virtual_s, tuple(run.choices), tuple(reached))


# -- the experiment ---------------------------------------------------------------------------


class TransferSeed(Scenario):
    name: ClassVar[str] = "transfer"
    seed_file: ClassVar[str] = "003_875fac220a975d0f.txt"
    summary: ClassVar[str] = ("parallel transfers race for a directory one of them makes; "
                              "fix: explicit parents, staged renames, verification")
    has_trials: ClassVar[bool] = True
    params: ClassVar[tuple[Param, ...]] = (
        Param("trials", 100, "trials per row (the link draws are paired across rows)", int,
              minimum=1),
        Param("rtt_s", 0.24, "round-trip time of the link, seconds (seed: 240 ms)",
              minimum=0.0),
        Param("rtt_jitter", 0.1, "each round trip is rtt_s times 1 +- this (assumed)",
              minimum=0.0),
        Param("handshake_rtts", 7, "round trips before a pipe's remote command runs "
                                   "(TCP, ssh key exchange, auth, channel, exec; assumed)",
              int, minimum=0),
        Param("launch_stagger_s", 0.005, "seconds between the shell starting one pipe and "
                                         "the next (assumed)", minimum=0.0),
        Param("bandwidth", 125e6, "bytes/s per stream (not in the seed; 1 Gbit/s assumed)",
              minimum=1.0),
        Param("prepare_gap_s", PREPARE_GAP_S, "seconds between making the destination "
                                              "tree and starting the pipes", minimum=0.0),
        Param("watch_poll", 1.0, "seconds between the consumer's looks at final names",
              minimum=0.001),
        Param("mount", "vers=3", "nfs(5) options of every host", str),
    )
    variants: ClassVar[tuple[Variant, ...]] = (
        Variant("naive", "the seed's five pipes in parallel", buggy=True),
        Variant("seed-fix", "the seed's run, then the config's pipe again once the others "
                            "are done", buggy=True),
        Variant("reference", "reference.transfer.transfer_all: explicit parents, staged "
                             "renames, bounded retries", buggy=False),
    )
    exploration: ClassVar[Exploration] = Exploration(explore_space, _explore_example,
                                                     max_deviations=8)

    def run(self, backend: Backend, seed: int, params: dict[str, Any],
            progress: Progress) -> ScenarioResult:
        if params["rtt_jitter"] >= 1:
            raise ScenarioError(f"parameter rtt_jitter={params['rtt_jitter']!r}: a round "
                                "trip cannot take no time; allowed: a float in [0, 1)")
        rows: list[dict[str, Any]] = []
        samples: dict[str, Any] = {}
        digests: list[str] = []
        for index, (variant, retry_host) in enumerate(GROUPS):
            progress(f"transfer: {variant}, retry on {retry_host} host, "
                     f"{params['trials']} trials")
            config_host = RETRY_HOSTS.get(retry_host, "receiver")
            session = backend.session(dict.fromkeys(HOSTS, params["mount"]),
                                      seed=seed * 100 + index)
            runs = []
            try:
                session.run([ProcessSpec("receiver", clear_base, (f"{BASE}/{index}",),
                                         "clear")], timeout=60)
                for trial in range(params["trials"]):
                    plan = link_plan(random.Random(f"transfer:{seed}:{trial}"), params,
                                     config_host)
                    runs.append(run_trial_in(session, f"{BASE}/{index}/t{trial}/dflash", plan,
                                             variant))
            finally:
                digests.append(session.close())
            done = [run.wall_s for run in runs if run.completed]
            rows.append({"variant": variant, "retry_host": retry_host,
                         "rtt_s": params["rtt_s"], "trials": len(runs),
                         "completed": len(done),
                         "enoent": sum(bool(run.enoent) for run in runs),
                         "stale_enoent": sum(run.stale_enoent for run in runs),
                         "torn_visible": sum(bool(run.torn) for run in runs),
                         "wall_virtual_s": round(statistics.median(done), 3) if done else None})
            samples[f"{variant}/{retry_host}"] = {
                "weights_done_s": [round(run.plan.seconds("weights"), 3) for run in runs],
                "retries": sum(run.retry is not None for run in runs),
                "wall_s": [round(wall, 6) for wall in done]}
        return ScenarioResult(self.name, backend.name, seed, dict(params), rows,
                              combine_digests(digests), samples)

    def table(self, result: ScenarioResult) -> str:
        params = result.params
        weights = file_seconds(SEED_TRANSFERS["weights"][0][1], params["bandwidth"])
        lines = [f"transfer (seed {self.seed_file}): five pipes in parallel over a "
                 f"{params['rtt_s'] * 1000:g} ms link ({params['handshake_rtts']} round trips "
                 f"+-{params['rtt_jitter'] * 100:g}% to open, started "
                 f"{params['launch_stagger_s'] * 1000:g} ms apart, "
                 f"{params['bandwidth'] / 1e6:g} MB/s per stream: the weights take "
                 f"{weights:.1f} s); mount {params['mount']!r}; backend {result.backend}",
                 "  retry_host: where the config's transfer and its retry run (same: the "
                 "host that makes the directory; other: another client)", "",
                 format_table(("variant", "retry_host", "trials", "completed", "enoent",
                               "stale_enoent", "torn_visible", "wall (median)"),
                              [(row["variant"], row["retry_host"], row["trials"],
                                row["completed"], row["enoent"], row["stale_enoent"],
                                row["torn_visible"],
                                "-" if row["wall_virtual_s"] is None
                                else f"{row['wall_virtual_s']:.2f} s")
                               for row in result.rows])]
        return "\n".join(lines)

    def fidelity_key_names(self) -> tuple[str, ...]:
        return ("variant", "retry_host")

    def fidelity_rows(self, result: ScenarioResult) -> list[FidelityRow]:
        """Per row: what went wrong in any trial (stale, enoent, torn, or clean), and the
        time to completion of the trials that completed."""
        rows = []
        for row in result.rows:
            walls = result.samples.get(f"{row['variant']}/{row['retry_host']}",
                                       {}).get("wall_s") or [0.0]
            kinds = [kind for kind, column in (("stale", "stale_enoent"), ("enoent", "enoent"),
                                               ("torn", "torn_visible")) if row[column]]
            if "stale" in kinds:
                kinds.remove("enoent")
            rows.append(FidelityRow((row["variant"], row["retry_host"]),
                                    "+".join(kinds) or "clean", statistics.median(walls),
                                    min(walls), max(walls), None))
        return rows

    def check(self, result: ScenarioResult) -> list[str]:
        """The reference always completes cleanly; the seed's fix never goes stale on
        the host that made the directory, and completes there."""
        problems = []
        for row in result.rows:
            label = f"{row['variant']}/{row['retry_host']}"
            if row["variant"] == "reference" and (
                    row["completed"] != row["trials"] or row["enoent"] or row["stale_enoent"]
                    or row["torn_visible"]):
                problems.append(f"{label}: expected every trial completed, no ENOENT and "
                                f"nothing torn; got {row}")
            if (row["variant"], row["retry_host"]) == ("seed-fix", "same") and (
                    row["stale_enoent"] or row["completed"] != row["trials"]):
                problems.append(f"{label}: a retry on the directory's own host must work; "
                                f"got {row}")
        return problems

