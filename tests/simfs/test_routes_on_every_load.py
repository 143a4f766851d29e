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
from pathlib import Path

import pytest

from simfs import SimfsError, SimulationEscape, World
from simfs._patch import _imports


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


# A library whose entry points moved in a version simfs has not met: its route
# fails, and the world must say so rather than let its native I/O go real.
_FAKE = "simfs_fake_moved_library"


def _route_of_an_older_version(module: object) -> None:
    getattr(module, "write_path")  # noqa: B009  (renamed write_to in this "version")


def _imports_the_fake() -> None:
    importlib.import_module(_FAKE)


@pytest.fixture
def moved_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    (tmp_path / f"{_FAKE}.py").write_text("__version__ = '9.0'\ndef write_to(path): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _imports.when_imported(_FAKE, _route_of_an_older_version)
    try:
        yield
    finally:
        _imports._routes.pop(_FAKE, None)
        _imports._broken.pop(_FAKE, None)
        sys.modules.pop(_FAKE, None)


def test_a_library_whose_route_fails_is_named_and_no_world_runs_while_it_is_loaded(
        moved_library: None) -> None:
    with pytest.warns(RuntimeWarning, match=rf"could not route {_FAKE} \({_FAKE} 9\.0\)"):
        importlib.import_module(_FAKE)
    world = World(seed=1)
    world.spawn(world.host("a"), lambda: None)
    with pytest.raises(SimfsError, match=r"_route_of_an_older_version failed with "
                                         r"AttributeError.*native file I/O would reach the "
                                         r"real machine"):
        world.run()


def test_a_library_whose_route_fails_inside_a_process_fails_that_process_naming_it(
        moved_library: None) -> None:
    world = World(seed=1)
    importer = world.spawn(world.host("a"), _imports_the_fake)
    world.run(check=False)
    assert isinstance(importer.exception(), SimfsError)
    assert f"could not route {_FAKE}" in str(importer.exception())
