"""The cas scenario reproduces seed 004's failures in the seed's code, none in the reference.

Facts: seed 004 (fixed .part/.building names collide when pods share the
root; size-only reuse serves another pod's bytes; a crashed writer's temp
stays forever; the orphan sweep took an in-flight temp); docs/design.md, "The
NFS model", and docs/nfs-facts.md.
"""

import json

import pytest

from scenarios._cli import main
from scenarios._sim import SimBackend
from scenarios.cas import (
    COLUMNS,
    Cas,
    CasInvariantViolated,
    RacePlan,
    Writer,
    check_race,
    count_collisions,
    run_race,
)


def _run(seed=0, trials=6, **given):
    params = Cas.resolve_params({name: str(value) for name, value in given.items()}, trials)
    return Cas().run(SimBackend(), seed, params, lambda message: None)


@pytest.fixture(scope="module")
def result():
    return _run()


def _row(result, experiment, variant):
    (row,) = [row for row in result.rows
              if row["experiment"] == experiment and row["variant"] == variant]
    return row


def test_four_writers_on_two_hosts_collide_on_the_seeds_fixed_part_and_fail(result):
    row = _row(result, "race", "seed")
    assert row["writers"] == 4 and row["trials"] == 6
    assert row["collisions"] >= 6  # every trial: at least one pair shares a .part
    assert row["failed"] > 0 and row["blake3_passes"] == 0  # size-only reuse never hashes


def test_the_reference_races_clean_and_verifies_each_reused_blob_exactly_once(result):
    row = _row(result, "race", "reference")
    assert {key: row[key] for key in ("corrupt_served", "collisions", "failed", "orphans_left")
            } == {"corrupt_served": 0, "collisions": 0, "failed": 0, "orphans_left": 0}
    assert row["blake3_passes"] == 1


def test_the_seeds_own_test_serves_corrupt_bytes_before_the_pr_and_repairs_them_after(result):
    seed, reference = _row(result, "seed-test", "seed"), _row(result, "seed-test", "reference")
    assert (seed["corrupt_served"], seed["repaired"]) == (1, "no")
    assert (reference["corrupt_served"], reference["repaired"]) == (0, "yes")
    assert reference["blake3_passes"] == 1
    assert result.samples["seed-test/reference"]["quarantined"] == 2  # the blob and the tree


def test_after_a_host_crash_the_boot_sweep_takes_the_dead_temp_and_spares_the_live_one(result):
    reference = result.samples["crash-sweep/reference"]
    assert reference["crashed"].startswith("HostCrashed")
    (swept,) = reference["boot"]["swept"]
    assert ".pod-a." in swept and swept.endswith(".tmp")
    row = _row(result, "crash-sweep", "reference")
    assert (row["orphans_left"], row["wrongly_swept"], row["failed"]) == (0, 0, 0)


def test_the_seeds_orphan_sweep_takes_the_live_part_and_leaves_the_dead_building(result):
    row = _row(result, "crash-sweep", "seed")
    assert (row["orphans_left"], row["wrongly_swept"], row["failed"]) == (1, 1, 1)
    assert result.samples["crash-sweep/seed"]["boot"]["temps_left"][0] == (
        "snapshots/dead.building")


def test_a_collection_beside_open_readers_leaves_nfs_alone_in_the_reference_only(result):
    reference = result.samples["gc-open/reference"]
    assert reference["gc"]["evicted"] == ["old"] and reference["gc"]["error"] is None
    assert len(reference["gc"]["silly_seen"]) == 1  # the blob the old reader holds open
    assert reference["old_reader"] == {"corrupt": 0, "error": None}  # still reads it
    assert reference["live_reader"] == {"corrupt": 0, "error": None}  # never ESTALE
    assert reference["left"] == {"left": [], "snapshots": ["live"]}
    seed = result.samples["gc-open/seed"]["gc"]["error"]
    # EBUSY (docs/design.md, "The NFS model")
    assert seed.startswith("OSError: [Errno 16]") and ".nfs" in seed


def test_the_table_and_json_rows_have_every_column_and_check_finds_nothing(result, tmp_path):
    assert [(row["experiment"], row["variant"]) for row in result.rows] == [
        (e, v) for e in ("race", "seed-test", "crash-sweep", "gc-open")
        for v in ("seed", "reference")]
    assert all(tuple(row) == COLUMNS for row in result.rows)
    assert "corrupt served" in Cas().table(result)
    assert Cas().check(result) == []
    out = tmp_path / "cas.json"
    assert main(["run", "cas", "--trials", "2", "--json", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    assert data["scenario"] == "cas" and len(data["rows"]) == 8
    assert set(data["rows"][0]) >= {"experiment", "variant", "writers", "trials",
                                    "corrupt_served", "collisions", "orphans_left",
                                    "blake3_passes"}


def test_check_flags_a_reference_that_served_corrupt_bytes(result):
    rows = [dict(row) for row in result.rows]
    rows[1]["corrupt_served"] = 2
    doctored = type(result)(**{**vars(result), "rows": rows})
    (problem,) = Cas().check(doctored)
    assert problem.startswith("race/reference: expected no failures")


def test_the_same_seed_gives_the_same_trace_sha256():
    first, again, other = _run(0, trials=2), _run(0, trials=2), _run(1, trials=2)
    assert again.trace_sha256 == first.trace_sha256 and again.rows == first.rows
    assert other.trace_sha256 != first.trace_sha256


def test_two_writers_on_one_part_collide_once_and_the_replay_line_reproduces_it():
    plan = RacePlan((Writer("pod-a", 0.0, 0.1), Writer("pod-b", 0.05, 0.1)), chunks=2)
    run = run_race(plan, "seed", seed=0)
    assert run.collisions >= 1
    with pytest.raises(CasInvariantViolated) as raised:
        check_race(run)
    replay = str(raised.value).split("replay: python -c ")[1]
    with pytest.raises(CasInvariantViolated) as again:
        exec(eval(replay), {})
    assert again.value.run.digest == run.digest
    check_race(run_race(plan, "reference", seed=0))


def test_collisions_count_overlapping_holders_of_one_temp_only():
    journals = [[["temp-open", "x.part", 0.0], ["temp-done", "x.part", 2.0]],
                [["temp-open", "x.part", 1.0], ["temp-done", "x.part", 3.0]],
                [["temp-open", "x.part", 3.5], ["temp-done", "x.part", 4.0]],
                [["temp-open", "y.part", 0.0], ["temp-done", "y.part", 9.0]]]
    assert count_collisions(journals) == 1


def test_a_race_plan_refuses_an_unknown_host():
    with pytest.raises(ValueError, match="writer host 'pod-z'"):
        RacePlan((Writer("pod-z", 0.0, 0.1),))
    assert main(["run", "cas", "--param", "writers=1"]) == 2


def test_fidelity_rows_name_the_failures_each_row_showed_and_the_reference_is_clean(result):
    from scenarios._fidelity import compare

    rows = {row.key: row for row in Cas().fidelity_rows(result)}
    assert Cas().fidelity_key_names() == ("experiment", "variant")
    assert [rows[(e, "reference")].outcome
            for e in ("race", "seed-test", "crash-sweep", "gc-open")] == ["clean"] * 4
    assert rows[("seed-test", "seed")].outcome == "corrupt"
    assert rows[("crash-sweep", "seed")].outcome == "failed+temps+live-swept"
    assert "collision" in rows[("race", "seed")].outcome
    # The first writer of a trial waits for its four chunks (>= 0.05 s each);
    # one that finds the tree built waits no simulated time at all.
    race = rows[("race", "reference")]
    assert 0.0 == race.min_s <= race.median_s and race.max_s >= 0.05 * 4
    table, flags = compare(list(rows.values()), list(rows.values()), poll=0.1)
    assert flags == [] and len(table) == 8
