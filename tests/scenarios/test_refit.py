"""The refit scenario reproduces seed 001's window table, and its metric claim.

The seed's table (001): where shard 2's reload lands, whether it is in the
communicator, in participants, whether it gets weights, and the outcome
before the PR, after it, and with the fix.
"""

import json
import random

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from scenarios import ScenarioError
from scenarios._cli import main
from scenarios._sim import SimBackend
from scenarios.refit import (
    FleetPlan,
    Refit,
    RefitInvariantViolated,
    Restart,
    check_invariant,
    fleet_plans,
    run_fleet,
    tape_chooser,
    window_plan,
)

# (window, variant): in communicator, in participants, gets weights, outcome.
# "In participants?" is each variant's own set: the seed prints the PR's;
# before the PR every shard was a candidate; the fix uses the communicator's.
SEED_ROWS = {
    ("W1", "before"): (True, True, True, "correct"),
    ("W1", "pr"): (True, True, True, "correct"),
    ("W1", "reference"): (True, True, True, "correct"),
    ("W2", "before"): (False, True, False, "promoted"),
    ("W2", "pr"): (False, True, False, "promoted"),
    ("W2", "reference"): (False, False, False, "skipped"),
    ("W3", "before"): (False, True, False, "promoted"),
    ("W3", "pr"): (False, False, False, "skipped"),
    ("W3", "reference"): (False, False, False, "skipped"),
    ("W4", "before"): (False, True, False, "correct"),
    ("W4", "pr"): (False, False, False, "correct"),
    ("W4", "reference"): (False, False, False, "correct"),
}
SEED_TABLE_LINES = [
    "W1 before the membership read  yes                   yes               yes"
    "            correct   correct        correct",
    "W2 during the rebuild          no                    yes               no"
    "             promoted  promoted       skipped",
    "W3 during the transfer         no                    no                no"
    "             promoted  skipped        skipped",
    "W4 after the promotion         no                    no                no"
    "             correct   correct        correct",
]
QUIET = lambda message: None  # noqa: E731


def _run(seed=0, **given):
    params = Refit.resolve_params({k: str(v) for k, v in given.items()}, None)
    return Refit().run(SimBackend(), seed, params, QUIET)


def _rows(result):
    return {(row["window"], row["variant"]): (row["in_communicator"], row["in_participants"],
                                              row["gets_weights"], row["outcome"])
            for row in result.rows}


@pytest.fixture(scope="module")
def result():
    return _run()


def test_every_window_and_variant_gives_the_seeds_row(result):
    assert [(row["window"], row["variant"]) for row in result.rows] == list(SEED_ROWS)
    assert _rows(result) == SEED_ROWS
    assert Refit().check(result) == []


def test_each_reload_really_landed_in_the_window_its_row_names(result):
    for key, sample in result.samples.items():
        assert sample["landed_in"] == key.split("/")[0], key


def test_the_printed_table_is_the_seeds(result):
    table = Refit().table(result)
    for line in SEED_TABLE_LINES:
        assert line in table.splitlines()
    assert "In the communicator?  In participants?  Gets weights?  Before" in table


@pytest.mark.parametrize("seed", [1, 2])
def test_other_seeds_move_the_reload_within_its_window_but_keep_the_table(seed, result):
    other = _run(seed)
    assert _rows(other) == SEED_ROWS
    assert other.trace_sha256 != result.trace_sha256
    assert (other.samples["W2/pr"]["lands_at"] != result.samples["W2/pr"]["lands_at"])


def test_the_same_seed_gives_the_same_trace_sha256(result):
    again = _run()
    assert again.trace_sha256 == result.trace_sha256 and again.rows == result.rows


def test_the_recovery_re_snapshot_path_has_the_same_windows_and_outcomes():
    # Seed 001: both call sites need the fix; on the recovery path the shard
    # restarting is the one whose exit failed the first transfer.
    recovery = _run(path="recovery")
    assert _rows(recovery) == SEED_ROWS
    assert all(sample["attempts"] == 2 for sample in recovery.samples.values())
    assert Refit().check(recovery) == []


def test_the_next_refit_takes_every_skipped_shard_and_leaves_all_current(result):
    for key, sample in result.samples.items():
        if key.endswith("/reference"):
            assert sample["all_current_after_next_refit"], key
            assert sample["violations"] == []


def test_the_buggy_variants_violate_the_invariant_exactly_where_they_promote(result):
    labels = {"W2": "W2 during the rebuild", "W3": "W3 during the transfer"}
    for key, sample in result.samples.items():
        window, variant = key.split("/")
        if SEED_ROWS[(window, variant)][3] == "promoted":
            assert sample["violations"] == [
                "refit 1 promoted to HEALTHY shard 2 holding version 0, not 1; its reload "
                f"landed in {labels[window]}"], key
        else:
            assert sample["violations"] == [], key


def test_the_json_rows_have_exactly_the_documented_fields(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["run", "refit", "--json", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert set(data) == {"scenario", "backend", "seed", "params", "rows", "trace_sha256"}
    assert data["scenario"] == "refit" and data["backend"] == "sim"
    assert len(data["rows"]) == 12
    for row in data["rows"]:
        assert list(row) == ["window", "variant", "in_communicator", "in_participants",
                             "gets_weights", "outcome"]
        key = (row["window"], row["variant"])
        assert tuple(row[k] for k in list(row)[2:]) == SEED_ROWS[key]
    assert "W2 during the rebuild" in capsys.readouterr().out


class _RealBackend:
    name = "real"

    def session(self, hosts, seed):
        raise AssertionError("the refit scenario must not open a real session")


def test_the_real_backend_is_refused_because_there_is_no_filesystem_to_test():
    params = Refit.resolve_params({}, None)
    with pytest.raises(ScenarioError, match="no filesystem component to run on real NFS"):
        Refit().run(_RealBackend(), 0, params, QUIET)


@pytest.mark.parametrize("given, message", [
    ({"shard": "4"}, "parameter shard=4: shards are 0..3"),
    ({"refit_at": "50"}, r"W1 \(main path\): no exit time in 1-49 s"),
    ({"min_reload_s": "700"}, "max_reload_s=600 is below min_reload_s=700"),
    ({"next_refit_s": "100"}, "next_refit_s=100 starts the next refit before"),
    ({"path": "sideways"}, "parameter path='sideways'"),
])
def test_parameters_the_windows_cannot_be_built_from_are_refused(given, message):
    with pytest.raises(ScenarioError, match=message):
        _run(**given)


# -- the metric (seed 001, "Why nothing catches it") ------------------------------------

W2_PLAN = FleetPlan(4, (900.0,), rebuild_s=30, transfer_s=90,
                    restarts=(Restart(2, exits_at=700, reload_s=215),))


@pytest.mark.parametrize("variant", ["before", "pr"])
def test_the_seeds_metric_lies_both_ways_when_a_w2_reload_is_promoted(variant):
    run = run_fleet(W2_PLAN, variant)
    holds = [engine.holds for engine in run.fleet.engines]
    assert holds == [1, 1, 0, 1]  # shard 2 got nothing: it holds the disk checkpoint
    metric = run.metric()
    assert metric[0] == 0  # never restarted: reads 0 though it holds version 1
    assert metric[2] == 1  # got nothing: reads current, as the promotion wrote it
    assert run.fleet.ledger.state(2).name == "HEALTHY"


def test_the_reference_metric_is_what_each_shard_really_holds():
    run = run_fleet(W2_PLAN, "reference")
    holds = {engine.shard: engine.holds for engine in run.fleet.engines}
    assert holds == {0: 1, 1: 1, 2: 0, 3: 1}
    assert run.metric() == holds
    assert run.fleet.ledger.state(2).name == "STALE"
    assert run.fleet.ledger.serving_behind(1) == frozenset()


# -- the invariant, and its exploration (the fast tier's share) -----------------------------


def test_a_violation_names_the_window_and_a_replay_that_raises_it_again():
    run = run_fleet(W2_PLAN, "pr", seed=5)
    with pytest.raises(RefitInvariantViolated) as raised:
        check_invariant(run)
    message = str(raised.value)
    assert raised.value.window == "W2" and "W2 during the rebuild" in message
    replay = message.split("replay: python -c ")[1]
    assert "seed=5" in replay and "chooser=" in replay
    with pytest.raises(RefitInvariantViolated) as again:
        exec(eval(replay), {})
    assert str(again.value) == message


def test_window_plans_land_the_reload_inside_the_window_they_name():
    params = Refit.resolve_params({}, None)
    for window in ("W1", "W2", "W3", "W4"):
        for seed in range(5):
            plan = window_plan(window, params, random.Random(seed))
            run = run_fleet(plan, "reference", seed=seed)
            assert run.fleet.window_of(run.fleet.landing(2), run.records[0]) == window


def _explore(variant, max_examples, phases=(Phase.generate, Phase.shrink)):
    windows = []

    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
              phases=phases, report_multiple_bugs=False, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(plan=fleet_plans(), seed=st.integers(0, 255),
           tape=st.lists(st.integers(0, 3), max_size=8))
    def explore(plan, seed, tape):
        run = run_fleet(plan, variant, seed=seed, chooser=tape_chooser(tape))
        windows.extend(run.landing_windows())
        check_invariant(run)

    explore()
    return windows


def test_a_hundred_explored_fleets_find_nothing_wrong_with_the_reference():
    windows = _explore("reference", 100)
    assert {"W2", "W3"} <= set(windows)  # it did land reloads mid-refit


@pytest.mark.parametrize("variant, windows", [("before", {"W2", "W3"}), ("pr", {"W2"})])
def test_exploration_finds_each_buggy_variant_in_the_window_the_seed_names(variant, windows):
    with pytest.raises(RefitInvariantViolated) as raised:
        _explore(variant, 300, phases=(Phase.generate,))
    assert raised.value.window in windows
