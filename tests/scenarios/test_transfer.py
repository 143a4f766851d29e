"""The transfer scenario reproduces seed 003 and the NFS trap it did not hit.

NFS facts (docs/nfs-facts.md, "Attribute and dentry caches", nfs(5)): a host
that looked a name up while it was absent trusts its negative entry until the
parent's cached attributes expire, acdirmin (30 s by default) after that
lookup; ``lookupcache=positive`` never trusts a negative entry.
"""

import json

import pytest

from scenarios._base import ScenarioError
from scenarios._cli import main
from scenarios._sim import SimBackend
from scenarios.transfer import (
    TRANSFERS,
    TransferInvariantViolated,
    TransferSeed,
    TrialPlan,
    check_trial,
    run_trial,
)

KEYS = {"variant", "retry_host", "rtt_s", "trials", "completed", "enoent", "stale_enoent",
        "torn_visible", "wall_virtual_s"}
TRIALS = 10


def _run(seed=0, backend=None, **given):
    params = TransferSeed.resolve_params({k: str(v) for k, v in given.items()}, None)
    return TransferSeed().run(backend or SimBackend(), seed, params, lambda message: None)


def _rows(result):
    return {(row["variant"], row["retry_host"]): row for row in result.rows}


@pytest.fixture(scope="module")
def seed_rtt():
    return _run(trials=TRIALS)


def test_at_the_seeds_240_ms_the_config_pipe_often_wins_the_race_and_fails_enoent(seed_rtt):
    naive = _rows(seed_rtt)[("naive", "none")]
    assert 0 < naive["enoent"] < TRIALS
    assert naive["completed"] == TRIALS - naive["enoent"]
    # tar writes in place: the consumer sees the weights torn in every trial.
    assert naive["torn_visible"] == TRIALS


def test_the_seeds_retry_on_the_host_that_made_the_directory_always_completes(seed_rtt):
    rows = _rows(seed_rtt)
    fix = rows[("seed-fix", "same")]
    assert fix["enoent"] == rows[("naive", "none")]["enoent"]  # the same draws, paired
    assert (fix["completed"], fix["stale_enoent"]) == (TRIALS, 0)


def test_the_seeds_retry_from_another_host_within_acdirmin_meets_its_negative_entry(seed_rtt):
    rows = _rows(seed_rtt)
    other = rows[("seed-fix", "other")]
    # The weights take 26.4 s at 1 Gbit/s: every retry lands within 30 s of
    # the failed lookup, and fails although the directory is on the server.
    # A real Linux 6.1 client does the same (the run in scenarios/transfer.py).
    assert other["stale_enoent"] == other["enoent"] == rows[("naive", "none")]["enoent"] > 0
    assert other["completed"] == TRIALS - other["stale_enoent"]


def test_the_reference_completes_every_trial_with_nothing_torn_on_either_host(seed_rtt):
    rows = _rows(seed_rtt)
    for host in ("same", "other"):
        row = rows[("reference", host)]
        assert (row["completed"], row["enoent"], row["stale_enoent"], row["torn_visible"]) == (
            TRIALS, 0, 0, 0)
        # Parallel: the weights' 26.4 s plus the set-up, not the sum of all five.
        assert 26.4 < row["wall_virtual_s"] < 26.4 + 2.0
    assert TransferSeed().check(seed_rtt) == []


def test_at_1_ms_the_weights_pipe_started_first_always_makes_the_directory_first():
    rows = _rows(_run(trials=6, rtt_s=0.001, watch_poll=5))
    assert rows[("naive", "none")]["enoent"] == 0
    assert rows[("naive", "none")]["completed"] == 6


def test_a_retry_after_acdirmin_finds_the_directory_even_from_the_other_host():
    # At 25 MB/s the weights take 132 s: the negative entry has expired.
    rows = _rows(_run(trials=6, bandwidth=25e6, watch_poll=30))
    other = rows[("seed-fix", "other")]
    assert other["enoent"] > 0 and other["stale_enoent"] == 0 and other["completed"] == 6


def test_with_lookupcache_positive_the_other_hosts_retry_is_not_stale():
    # The stale ENOENT is the client's negative entry: a mount that never
    # trusts one has none (nfs(5) lookupcache=positive).
    rows = _rows(_run(trials=6, mount="vers=3,lookupcache=positive", watch_poll=5))
    other = rows[("seed-fix", "other")]
    assert other["enoent"] > 0 and other["stale_enoent"] == 0 and other["completed"] == 6


def test_check_flags_a_reference_row_with_a_torn_file(seed_rtt):
    rows = [dict(row) for row in seed_rtt.rows]
    for row in rows:
        if (row["variant"], row["retry_host"]) == ("reference", "other"):
            row["torn_visible"] = 1
    doctored = type(seed_rtt)(**{**vars(seed_rtt), "rows": rows})
    (problem,) = TransferSeed().check(doctored)
    assert problem.startswith("reference/other: expected every trial completed")


def test_the_table_names_every_row_and_the_link(seed_rtt):
    table = TransferSeed().table(seed_rtt)
    assert "240 ms link" in table and "the weights take 26.4 s" in table
    assert all(f"{variant}" in table for variant in ("naive", "seed-fix", "reference"))


def test_the_same_seed_gives_the_same_trace_sha256():
    first, again, other = (_run(seed, trials=2, watch_poll=5) for seed in (0, 0, 1))
    assert again.trace_sha256 == first.trace_sha256 and again.rows == first.rows
    assert other.trace_sha256 != first.trace_sha256


def test_the_json_has_the_documented_rows(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["run", "transfer", "--trials", "2", "--param", "rtt_s=0.001", "--json",
                 str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert data["scenario"] == "transfer" and data["params"]["rtt_s"] == 0.001
    assert [(r["variant"], r["retry_host"]) for r in data["rows"]] == [
        ("naive", "none"), ("seed-fix", "same"), ("seed-fix", "other"), ("reference", "same"),
        ("reference", "other")]
    assert all(set(row) == KEYS and row["rtt_s"] == 0.001 for row in data["rows"])
    assert "stale_enoent" in capsys.readouterr().out


def test_a_jitter_of_a_whole_round_trip_is_refused(capsys):
    assert main(["run", "transfer", "--param", "rtt_jitter=1"]) == 2
    assert "parameter rtt_jitter=1.0" in capsys.readouterr().err


@pytest.mark.parametrize(("fields", "message"), [
    ({"transfers": ("config", "weights")}, "transfers must be distinct names"),
    ({"transfers": ("weights", "ftp")}, "transfers must be distinct names"),
    ({"opens_at": (0.1,)}, "opens_at needs one time >= 0 per transfer"),
    ({"bandwidth": 0}, "bandwidth must be > 0"),
    ({"config_host": "consumer"}, "config_host must be one of"),
    ({"watch_poll": 0}, "watch_poll must be > 0 seconds or None"),
])
def test_a_trial_plan_that_cannot_be_run_is_refused_naming_the_field(fields, message):
    plan = {"transfers": ("weights", "config"), "opens_at": (0.1, 0.2), "retry_opens_at": 0.1,
            "bandwidth": 1e9, **fields}
    with pytest.raises(ValueError, match=message):
        TrialPlan(**plan)


def test_a_single_trial_names_the_two_transfers_in_the_race_and_replays_from_its_line():
    plan = TrialPlan(("weights", "config"), (0.2, 0.1), 0.0, 1e9, watch_poll=None)
    run = run_trial(plan, "naive", seed=3)
    with pytest.raises(TransferInvariantViolated) as raised:
        check_trial(run)
    assert "ENOENT in config; transfers involved: weights, config" in str(raised.value)
    replay = str(raised.value).split("replay: python -c ")[1]
    with pytest.raises(TransferInvariantViolated) as again:
        exec(eval(replay), {})
    assert again.value.run.digest == run.digest


def test_the_reference_passes_the_same_trial_the_naive_fails():
    plan = TrialPlan(TRANSFERS, (0.2, 0.2, 0.1, 0.0, 0.0), 0.0, 1e9, "second")
    check_trial(run_trial(plan, "reference", seed=3))


def test_an_unknown_variant_is_refused():
    plan = TrialPlan(("weights",), (0.0,), 0.0, 1e9)
    with pytest.raises(ScenarioError, match="unknown variant 'fast'; variants: naive"):
        run_trial(plan, "fast")


def test_on_real_mounts_each_host_runs_plain_processes_on_its_own_root(tmp_path):
    # A local directory stands in for the mounts (no NFS caches): the
    # processes are forked OS processes, with real (here near-zero) times.
    from scenarios._real import RealBackend

    mounts = {host: str(tmp_path) for host in ("receiver", "second", "consumer")}
    result = _run(backend=RealBackend(mounts, verify_nfs=False), trials=1, rtt_s=0,
                  launch_stagger_s=0, bandwidth=1e15, prepare_gap_s=0, watch_poll=0.001)
    assert result.backend == "real"
    rows = _rows(result)
    for host in ("same", "other"):
        assert rows[("reference", host)]["completed"] == 1
        assert rows[("reference", host)]["torn_visible"] == 0
    config = tmp_path / "transfer/3/t0/dflash/models/Qwen3.6-27B-DFlash/config.json"
    assert config.read_bytes().startswith(b"models/Qwen3.6-27B-DFlash/config.json\n")


def test_fidelity_flags_the_other_hosts_stale_retry_on_a_filesystem_without_nfs_caches(
        tmp_path):
    # A local disk has no negative entries: the retry from the other host
    # cannot meet one, so the model's "stale" row must be flagged.
    from scenarios._fidelity import run_fidelity
    from scenarios._real import RealBackend

    mounts = {host: str(tmp_path) for host in ("receiver", "second", "consumer")}
    params = TransferSeed.resolve_params(
        {"rtt_s": "0.01", "rtt_jitter": "0.9", "launch_stagger_s": "0", "bandwidth": "1e15",
         "prepare_gap_s": "0", "watch_poll": "0.01"}, trials=1)
    table, flags = run_fidelity(TransferSeed(), SimBackend(), RealBackend(mounts,
                                                                          verify_nfs=False),
                                0, params, lambda message: None)
    assert any(flag.startswith("seed-fix/other: outcome stale vs ") for flag in flags), flags
    assert "stale/" in table
