"""A campaign's seed names one search, whatever the process imported before it.

Hypothesis draws some values from literals it finds in the local modules
loaded so far (``simfs/strategies/_constants.py`` says how).  Found through
pytest-xdist: ``explore(handshake, "marker_exists", examples=1000)`` found 0
failures in a fresh process and 9 after ``import compose/vm.py``.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path

import pytest

from scenarios import get
from scenarios._explore import SearchState, explore

# Literals a search could draw: every world seed (0-255) and delay step, as
# an unrelated module the test process happens to import might hold them.
_CONSTANTS_MODULE = "values = [{}]\n".format(", ".join(str(n) for n in range(3, 256, 2)))


def _search_fingerprint() -> list[tuple[object, ...]]:
    """Every example the search drew (its values and world seed), then the
    running (examples, virtual seconds, failures) after each.

    The drawn values are what the literals move: a moved world seed can give
    the same virtual time and verdict, so the counts alone hide it.
    """
    scenario = get("handshake")
    declared = scenario.exploration
    seen: list[tuple[object, ...]] = []

    def recording_run(variant, example, world_seed, schedule):
        seen.append((sorted(example.items()), world_seed))
        return declared.run(variant, example, world_seed, schedule)

    def record(state: SearchState) -> None:
        seen.append((state.examples, round(state.virtual_s, 9), state.failures))

    # Patched on the class, not a subclass: the search pins the constants of
    # the scenario's own module, scenarios.handshake.
    scenario.exploration = dataclasses.replace(declared, run=recording_run)
    try:
        explore(scenario, "marker_exists", examples=60, seed=3, on_example=record)
    finally:
        scenario.exploration = declared
    return seen


def _search_fingerprint_without(module) -> list[tuple[object, ...]]:
    """The search as a process that never imported ``module`` runs it."""
    sys.modules.pop(module.__name__)
    try:
        return _search_fingerprint()
    finally:
        sys.modules[module.__name__] = module


@pytest.fixture
def module_full_of_constants(tmp_path: Path):
    """Import a local module whose literals cover the search space, as vm.py's did."""
    source = tmp_path / "unrelated_constants.py"
    source.write_text(_CONSTANTS_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("unrelated_constants")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("unrelated_constants", None)


def test_the_same_campaign_seed_searches_the_same_examples_after_an_unrelated_import(
        module_full_of_constants):
    before_import_search = _search_fingerprint_without(module_full_of_constants)
    after_import_search = _search_fingerprint()
    assert after_import_search == before_import_search
