"""The plugin behind run_suite.py runs each test of a suite inside a world.

Checked on a small suite instead of filelock's (minutes): the test body and
its fixtures are a simulated process, ``tmp_path`` is on the export, an
async test runs on the virtual clock, a test that needs a real process
fails loudly, and a test the world stops midway does not break the next.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.run_suite import _outcomes

SUITE = '''
import asyncio
import os
import subprocess

import pytest


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "marker"
    path.write_text("set up in the world")
    yield path
    path.unlink()


def test_fixture_and_body_share_the_export(marker, tmp_path):
    assert str(tmp_path).startswith("/shared/")
    assert marker.read_text() == "set up in the world"
    assert sorted(os.listdir(tmp_path)) == ["marker"]


async def test_an_hour_of_asyncio_sleep_is_virtual():
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.sleep(3600)
    assert loop.time() - start == 3600


def test_a_real_subprocess_is_refused(marker):
    subprocess.run(["true"], check=True)


def test_runs_after_a_refusal(marker):
    assert marker.exists()
'''


def test_each_test_of_a_suite_runs_in_a_world_and_refusals_are_loud(
        pytester: pytest.Pytester, tmp_path: Path):
    pytester.makepyfile(test_suite=SUITE)
    junit = tmp_path / "report.xml"
    pytester.runpytest("-s", "-p", "tests.compat.suite_plugin",
                                f"--junitxml={junit}")
    outcomes = _outcomes(junit)
    assert {test.rsplit("::", 1)[1]: outcome.split(":")[0]
            for test, outcome in outcomes.items()} == {
        "test_fixture_and_body_share_the_export": "passed",
        "test_an_hour_of_asyncio_sleep_is_virtual": "passed",
        "test_a_real_subprocess_is_refused": "failed",
        "test_runs_after_a_refusal": "passed",
    }
    refused = next(o for t, o in outcomes.items() if t.endswith("refused"))
    assert "SimulationEscape" in refused and "subprocess.Popen" in refused
