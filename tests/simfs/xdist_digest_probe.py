"""Run by ``test_xdist_determinism`` inside pytest-xdist workers, never collected itself.

Each case writes the trace digest of one seed, and the worker that ran it,
to ``$SIMFS_DIGESTS_OUT/<seed>``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.simfs.test_determinism import world_digest


@pytest.mark.parametrize("seed", range(6))
def test_write_the_digest_of_a_seed_from_a_worker(seed: int) -> None:
    worker = os.environ["PYTEST_XDIST_WORKER"]  # KeyError: not run by an xdist worker
    digest, _ = world_digest(seed)
    Path(os.environ["SIMFS_DIGESTS_OUT"], str(seed)).write_text(f"{digest} {worker}")
