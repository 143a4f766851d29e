"""One exploration API for every scenario: explore, shrink, replay, shard, share a database."""

import dataclasses
import functools
import subprocess
import sys

import pytest

from scenarios import SCENARIOS, ScenarioError, get
from scenarios._cli import main
from scenarios._explore import exploration_of, explore, replay, shard_seed
from scenarios._explore_cli import parse_budget, parse_shard

# Seed 000's bug: a bare exists() stalls on the negative dentry; found in a
# handful of examples (measured: the 2nd), so these stay in the fast tier.
FAST = {"examples": 20}


@pytest.fixture(scope="module")
def found_stall():
    """One search of the bare exists(), shared by the tests that read its result."""
    return explore(get("handshake"), "exists", **FAST)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_seed_scenario_declares_what_may_vary(name):
    assert exploration_of(get(name)).space is not None


def test_a_scenario_without_a_declaration_is_refused_by_name():
    class Bare(SCENARIOS["handshake"]):
        name = "bare"
        exploration = None

    with pytest.raises(ScenarioError, match="'bare' declares nothing to explore"):
        exploration_of(Bare)


def test_exploring_the_bare_exists_finds_the_stall_and_shrinks_it_to_default_mounts(found_stall):
    found = found_stall
    assert found.failure is not None
    example = found.failure.example
    assert (example["waiter_mount"], example["creator_mount"]) == ("vers=3", "vers=3")
    assert "saw" in found.failure.outcome.problems[0]


def test_a_replay_token_reruns_the_minimal_example_in_a_fresh_process_with_its_digest(
        found_stall):
    found = found_stall
    token = found.failure.token
    rerun = subprocess.run([sys.executable, "-m", "scenarios", "replay", token],
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 1, rerun.stderr
    assert f"trace sha256 {found.failure.outcome.digest}" in rerun.stdout
    assert "violated: the consumer saw" in rerun.stdout or "violated: the trainer saw" in \
        rerun.stdout


def test_a_replay_in_this_process_gives_the_digest_the_search_reported(found_stall):
    found = found_stall
    _, outcome = replay(found.failure.token)
    assert outcome == found.failure.outcome


def test_a_damaged_token_is_refused_naming_it():
    with pytest.raises(ScenarioError, match="damaged"):
        replay("simfs1-AAAA")


def test_a_failure_saved_in_the_shared_database_is_replayed_first_by_the_next_shard(tmp_path):
    # prune/rmtree, not the handshake: Hypothesis's first, simplest example
    # already stalls the bare exists, so a replay would look like a fresh find.
    first = explore(get("prune"), "rmtree", database=str(tmp_path), **FAST)
    again = explore(get("prune"), "rmtree", database=str(tmp_path), seed=99,
                    shard=1, shards=4, **FAST)
    assert first.first_failure > 1
    assert again.first_failure == 1
    assert again.failure.example == first.failure.example


def test_shards_search_with_distinct_seeds_and_shard_zero_of_one_is_the_campaign_seed():
    seeds = [shard_seed(5, index, 8) for index in range(8)]
    assert len(set(seeds)) == 8
    assert seeds == [shard_seed(5, index, 8) for index in range(8)]
    assert shard_seed(5, 0, 1) == 5


@pytest.mark.parametrize("text", ["3/3", "1", "a/b", "-1/2"])
def test_a_bad_shard_is_refused_naming_it(text):
    with pytest.raises(ScenarioError, match=f"--shard {text!r}"):
        parse_shard(text)


def test_budgets_read_seconds_minutes_and_hours():
    assert [parse_budget(t) for t in ("60s", "10m", "1h", "90")] == [60, 600, 3600, 90]
    with pytest.raises(ScenarioError, match="'soon'"):
        parse_budget("soon")


def test_an_unknown_variant_is_refused_listing_the_variants():
    with pytest.raises(ScenarioError, match="variants: exists, marker_exists"):
        explore(get("handshake"), "poll", **FAST)


def test_the_explore_command_prints_the_minimal_example_and_a_replay_command(capsys):
    code = main(["explore", "handshake", "--variant", "exists", "--examples", "20"])
    out = capsys.readouterr().out
    assert code == 1
    assert "handshake/exists: " in out and "violation found at example" in out
    assert "minimal example: layout=" in out
    assert "replay: python -m scenarios replay simfs1-" in out


def test_the_run_command_loads_neither_hypothesis_nor_pytest():
    code = ("import sys; from scenarios._cli import _parser; _parser(); "
            "import scenarios._explore_cli; "
            "print(sorted(m for m in ('hypothesis', 'pytest') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_a_spent_wall_budget_ends_a_clean_search_without_a_failure():
    # A budget far shorter than Hypothesis's own start-up: spent before the
    # first example, whatever the machine's speed.
    state = explore(get("handshake"), "marker_exists", examples=1000, budget_s=1e-9)
    assert state.budget_spent and state.failure is None and state.examples == 0


def _narrowed(name, **space_args):
    """The scenario, its search narrowed to part of its space (one of its bugs)."""
    scenario = get(name)
    space = functools.partial(scenario.exploration.space, **space_args)
    return type(f"{scenario.__name__}Narrowed", (scenario,),
                {"exploration": dataclasses.replace(scenario.exploration, space=space)})


def test_exploring_unwatched_naive_transfers_finds_the_config_enoent_and_replays_it():
    # Seed 003; measured: found at the 5th example, 17 runs with shrinking.
    found = explore(_narrowed("transfer", watch=False), "naive", examples=20)
    assert found.failure is not None
    assert found.failure.example["transfers"] == ["weights", "config"]
    assert found.failure.outcome.problems[0].startswith("ENOENT in config")
    # The token names the scenario: replayed by the scenario's own declaration.
    failure, outcome = replay(found.failure.token)
    assert failure.scenario == "transfer" and outcome == found.failure.outcome


def test_exploring_the_naive_transfers_with_a_watching_consumer_finds_a_violation():
    found = explore(get("transfer"), "naive", examples=10)
    assert found.failure is not None and found.failure.outcome.problems


def test_exploring_the_seeds_cas_finds_a_violation_and_its_token_replays_in_a_fresh_process():
    # Seed 004; measured: the unverified reuse of a stale blob at the 5th example.
    found = explore(get("cas"), "seed", examples=10)
    assert found.failure is not None
    rerun = subprocess.run([sys.executable, "-m", "scenarios", "replay", found.failure.token],
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 1, rerun.stderr
    assert f"trace sha256 {found.failure.outcome.digest}" in rerun.stdout


@pytest.mark.parametrize(("name", "variant"), [("transfer", "reference"), ("cas", "reference")])
def test_a_few_explored_examples_of_a_reference_find_nothing(name, variant):
    state = explore(get(name), variant, examples=10)
    assert state.failure is None and state.examples == 10
