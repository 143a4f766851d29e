"""The prune scenario reproduces seed 002's experiments (docs/nfs-facts.md, "Silly
rename"; seed 002)."""

import json

import pytest

from scenarios._cli import main
from scenarios._sim import SimBackend
from scenarios.prune import Prune

KEYS = {"experiment", "variant", "prunes", "failed", "left", "rmtree_calls", "retry_sleep_s"}


def _run(seed=0, **given):
    params = Prune.resolve_params({name: str(value) for name, value in given.items()}, None)
    return Prune().run(SimBackend(), seed, params, lambda message: None)


@pytest.fixture(scope="module")
def result():
    return _run()


def _row(result, experiment, variant):
    (row,) = [row for row in result.rows
              if row["experiment"] == experiment and row["variant"] == variant]
    return row


def test_saving_every_step_the_seeds_rmtree_fails_prunes_and_leaves_step_39(result):
    row = _row(result, "every-step", "rmtree")
    # Every prune meets a late close once; the next cleanup gets it, but the
    # last prune fails and nothing comes after it (the seed's 1-GPU run).
    assert row["failed"] == 39 and row["prunes"] == 39 + 38 and row["left"] == 1
    assert row["rmtree_calls"] == row["prunes"] and row["retry_sleep_s"] == 0
    assert result.samples["every-step/rmtree"]["checkpoints"] == ["step_39", "step_40"]


def test_saving_every_step_the_reference_removes_all_39_old_ones_and_keeps_only_the_last(result):
    row = _row(result, "every-step", "reference")
    assert (row["prunes"], row["failed"], row["left"]) == (39, 0, 0)
    assert 39 * 2 <= row["rmtree_calls"] <= 39 * 5  # windows of 0-0.38 s: 1 to 4 retries
    assert 0 < row["retry_sleep_s"] <= 39 * 0.75
    assert result.samples["every-step/reference"]["checkpoints"] == ["step_40"]
    assert result.samples["every-step/reference"]["warnings"] == 0


def test_ten_held_directories_cost_the_reference_0_75_s_and_14_calls_and_uncapped_7_5_s_and_50(
        result):
    got = {row["variant"]: (row["prunes"], row["failed"], row["left"], row["rmtree_calls"],
                            row["retry_sleep_s"])
           for row in result.rows if row["experiment"] == "ten-held-open"}
    assert got == {"rmtree": (10, 10, 10, 10, 0.0),
                   "uncapped-retry": (10, 10, 10, 50, 7.5),
                   "reference": (10, 10, 10, 14, 0.75)}


def test_on_the_slower_server_the_directory_outlives_one_cleanup_and_the_next_removes_it(result):
    row = _row(result, "slow-server", "reference")
    assert (row["prunes"], row["failed"], row["left"], row["rmtree_calls"]) == (3, 1, 0, 7)
    assert row["retry_sleep_s"] == pytest.approx(0.75)
    assert result.samples["slow-server/reference"]["checkpoints"] == ["step_3"]


def test_the_nfs_entry_of_a_replaced_open_sidecar_is_no_checkpoint_to_the_reference(result):
    reference = result.samples["replace-open-sidecar/reference"]
    assert reference["nfs_leftovers"] == 1
    assert _row(result, "replace-open-sidecar", "reference") == {
        "experiment": "replace-open-sidecar", "variant": "reference", "prunes": 1, "failed": 0,
        "left": 0, "rmtree_calls": 1, "retry_sleep_s": 0.0}
    # A listing that takes every entry for a checkpoint tries to prune it.
    seed = _row(result, "replace-open-sidecar", "rmtree")
    assert (seed["prunes"], seed["failed"], seed["left"]) == (2, 1, 1)


def test_the_table_prints_every_experiment_and_variant_and_check_finds_nothing(result):
    assert [(row["experiment"], row["variant"]) for row in result.rows][:3] == [
        ("every-step", "rmtree"), ("every-step", "uncapped-retry"), ("every-step", "reference")]
    assert len(result.rows) == 12 and all(set(row) == KEYS for row in result.rows)
    table = Prune().table(result)
    assert "rmtree calls" in table and "ten-held-open" in table and "0.75 s" in table
    assert Prune().check(result) == []


def test_check_flags_a_reference_that_leaves_a_directory(result):
    rows = [dict(row) for row in result.rows]
    for row in rows:
        if (row["experiment"], row["variant"]) == ("every-step", "reference"):
            row["failed"], row["left"] = 1, 1
    doctored = type(result)(**{**vars(result), "rows": rows})
    (problem,) = Prune().check(doctored)
    assert problem.startswith("every-step/reference: expected 39 prunes, none failed")


def test_async_saves_give_the_same_outcome():
    result = _run(steps=8, saves="async")
    assert _row(result, "every-step", "reference")["left"] == 0
    assert _row(result, "every-step", "rmtree")["left"] == 1
    assert result.samples["every-step/reference"]["checkpoints"] == ["step_8"]
    assert Prune().check(result) == []


def test_the_same_seed_gives_the_same_trace_sha256():
    first, again, other = _run(0, steps=4), _run(0, steps=4), _run(1, steps=4)
    assert again.trace_sha256 == first.trace_sha256 and again.rows == first.rows
    assert other.trace_sha256 != first.trace_sha256


def test_the_json_has_the_documented_rows(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["run", "prune", "--param", "steps=5", "--json", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert data["scenario"] == "prune" and data["params"]["steps"] == 5
    assert len(data["rows"]) == 12 and all(set(row) == KEYS for row in data["rows"])
    assert "experiment" in capsys.readouterr().out


def test_an_unknown_saves_mode_is_refused(capsys):
    assert main(["run", "prune", "--param", "saves=later"]) == 2
    assert "parameter saves='later'" in capsys.readouterr().err
