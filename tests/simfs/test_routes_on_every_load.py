"""A library's routes go in again each time its module is loaded afresh.

A route put in when a module is imported (``simfs/_patch/_imports.py``)
used to be forgotten after that first load.  pytester's in-process runs
drop from ``sys.modules`` every module they first imported, so after one
imported ``multiprocessing.pool`` the next import made an unrouted ``Pool``
that reached the real ``os.pipe`` inside the world: which test failed
depended on the order pytest-xdist gave the tests.
"""

from __future__ import annotations

import importlib
import multiprocessing
import sys
from collections.abc import Iterator

import pytest

from simfs import SimulationEscape, World


def _pool() -> None:
    multiprocessing.get_context("spawn").Pool(1)


@pytest.fixture
def pool_module_loaded_afresh() -> Iterator[None]:
    """multiprocessing.pool as a later import finds it after a pytester run dropped it."""
    world = World(seed=1)  # the routes are in
    world.spawn(world.host("a"), lambda: None)
    world.run()
    importlib.import_module("multiprocessing.pool")  # its first load, routed
    original = sys.modules.pop("multiprocessing.pool")
    try:
        fresh = importlib.import_module("multiprocessing.pool")
        assert fresh is not original
        yield
    finally:
        sys.modules["multiprocessing.pool"] = original
        multiprocessing.pool = original  # type: ignore[attr-defined]


def test_a_pool_module_loaded_afresh_is_routed_again(pool_module_loaded_afresh: None) -> None:
    world = World(seed=1)
    world.spawn(world.host("a"), _pool)
    with pytest.raises(SimulationEscape, match=r"multiprocessing\.pool\.Pool"):
        world.run()
