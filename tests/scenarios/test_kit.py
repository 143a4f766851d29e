"""The scenario kit: every registered scenario is one module plus its test.

These loop over ``scenarios.SCENARIOS`` (every public module of the package),
so a new incident is checked here by being added, not by being listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest

from scenarios import SCENARIOS
from scenarios._base import InvariantViolated, RunRecord
from scenarios._explore import exploration_of

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_has_its_own_test_module(name):
    assert (TESTS / f"test_{name}.py").is_file(), (
        f"scenario {name!r} has no tests/scenarios/test_{name}.py: a scenario is its module "
        "plus its test")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_runs_the_seed_s_buggy_code_beside_a_fix(name):
    variants = SCENARIOS[name].variants
    assert any(v.buggy for v in variants) and any(not v.buggy for v in variants), variants


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_names_its_seed_and_declares_what_may_vary(name):
    scenario = SCENARIOS[name]
    assert scenario.seed_file.endswith(".txt") and scenario.summary
    assert callable(exploration_of(scenario).run)


@dataclass
class _Record(RunRecord):
    replay_imports: ClassVar[str] = "from scenarios.example import *"
    replay_call: ClassVar[tuple[str, str]] = ("check", "run")

    plan: Any
    variant: str
    seed: int
    choices: list[int] = field(default_factory=list)


def test_a_run_record_s_replay_line_reruns_its_plan_variant_seed_and_schedule():
    record = _Record((1, "a"), "seed", 7, [0, 2])
    assert record.replay_line() == ("from scenarios.example import *; check(run((1, 'a'), "
                                    "'seed', seed=7, chooser=[0, 2]))")


def test_an_invariant_violation_says_what_went_wrong_then_how_to_replay_it():
    record = _Record("plan", "seed", 3)
    error = InvariantViolated(record, "variant 'seed': two writers", "plan: 'plan'")
    assert error.run is record
    assert str(error).splitlines() == [
        "variant 'seed': two writers", "plan: 'plan'",
        f"replay: python -c {record.replay_line()!r}"]


@pytest.mark.parametrize("module, violation", [
    ("scenarios._cas_race", "CasInvariantViolated"),
    ("scenarios._transfer_sim", "TransferInvariantViolated"),
    ("scenarios._fleet_sim", "RefitInvariantViolated"),
])
def test_each_scenario_s_violation_is_an_invariant_violation(module, violation):
    import importlib

    assert issubclass(getattr(importlib.import_module(module), violation), InvariantViolated)
