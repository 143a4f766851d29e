"""An explored test searches the same worlds whatever else its process imported.

Hypothesis draws some values from literals of every local module loaded when
a test case starts (``simfs/strategies/_constants.py``), so a derandomized
``simfs.explore`` test drew other worlds after an unrelated import: the
README's marker search gave one fingerprint alone and another after the
refit scenario's search had run in the same interpreter (bench/
explore_identity.py).  ``explore`` now pins them to the test's own module.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from simfs import World
from simfs.strategies import explore, mount_options

# Literals a search could draw (world seeds, choices), as an unrelated local
# module the test process happens to import might hold them.
_CONSTANTS_MODULE = "values = [{}]\n".format(", ".join(str(n) for n in range(3, 4096, 7)))


def _drawn_worlds() -> list[tuple[object, ...]]:
    seen: list[tuple[object, ...]] = []

    @explore(hosts={"a": mount_options(), "b": mount_options()}, max_examples=40,
             hypothesis_settings=settings(derandomize=True, database=None))
    def test_body(world: World) -> None:
        seen.append((world.seed, *(world.hosts[name].mount for name in sorted(world.hosts))))

    test_body()
    return seen


@pytest.fixture
def module_full_of_constants(tmp_path: Path) -> Iterator[object]:
    (tmp_path / "unrelated_constants_for_explore.py").write_text(_CONSTANTS_MODULE)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("unrelated_constants_for_explore")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("unrelated_constants_for_explore", None)


def test_an_explored_test_draws_the_same_worlds_after_an_unrelated_import(
        module_full_of_constants: object) -> None:
    sys.modules.pop("unrelated_constants_for_explore")
    try:
        alone = _drawn_worlds()
    finally:
        sys.modules["unrelated_constants_for_explore"] = module_full_of_constants  # type: ignore[assignment]
    assert _drawn_worlds() == alone
