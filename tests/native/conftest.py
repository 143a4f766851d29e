"""The native tier: torch, pyarrow, pandas, h5py, zarr and datasets, which open
paths in native code, inside the world (docs/compatibility.md).

Run with ``pytest -m native tests/native`` in an environment that has
``torch==2.13.0+cpu``, ``pyarrow``, ``pandas``, ``h5py``, ``zarr`` and
``datasets`` (CI installs them into their own venv, ``.ci/run``): none is a
dependency of simfs or of the ``test`` extra.  The fast tier deselects these
tests (``-m 'not native'``) and never imports them: each test imports them
itself (pandas in a fresh interpreter, for its first import inside a process).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simfs import World

pytestmark = pytest.mark.native


@pytest.fixture
def export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real directory at the export's path, with a real subdirectory ``x``:
    what a machine where the export's path is a real mount looks like.  Each
    test checks it stays exactly as it was (nothing reached a real file)."""
    real = tmp_path / "shared"
    (real / "x").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return real


def real_listing(export: Path) -> list[str]:
    return sorted(str(p.relative_to(export)) for p in export.rglob("*"))


def two_hosts(export: Path, seed: int = 0) -> tuple[World, object, object]:
    world = World(seed=seed, export=str(export))
    world.server.mkdir(f"{export}/x")
    return world, world.host("a"), world.host("b")
