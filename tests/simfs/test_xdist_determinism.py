"""The same seed gives the same digest in a pytest-xdist worker as here (issue 10, item 6).

An xdist worker is a fresh interpreter started by execnet, which runs its
own real threads (the channel's I/O) beside the tests and reroutes stdio;
the digest must not notice.  Two workers share the seeds, so each also runs
worlds after other worlds, as a long-lived process does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.simfs.test_determinism import world_digest

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("xdist_digest_probe.py")
SEEDS = range(6)


def test_seeds_give_the_same_digest_in_xdist_workers_as_in_this_process(tmp_path: Path):
    env = dict(os.environ, SIMFS_DIGESTS_OUT=str(tmp_path), PYTHONHASHSEED="77")
    command = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "xdist", "-p",
               "no:cacheprovider", "-o", "addopts=", "-o", "python_files=xdist_digest_probe.py",
               str(PROBE)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    found = {int(path.name): path.read_text().split() for path in tmp_path.iterdir()}
    assert sorted(found) == list(SEEDS)
    assert {worker for _, worker in found.values()} <= {"gw0", "gw1"}
    here = {seed: world_digest(seed)[0] for seed in SEEDS}
    assert {seed: digest for seed, (digest, _) in found.items()} == here
