"""trio is routed when a program imports it, not before.

``simfs._patch.install`` no longer imports trio (a fifth of the CLI's
start-up, issue 16): it routes trio right after the program imports it, or
at once if trio is already loaded.  Each case runs in a fresh interpreter,
where nothing imported trio yet.
"""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_running_a_world_does_not_import_trio():
    code = ("import sys, os\nfrom simfs import World\nw = World(seed=1)\n"
            "w.spawn(w.host('h'), os.path.exists, '/shared/x')\nw.run()\n"
            "print('trio' in sys.modules)")
    assert _run(code).strip() == "False"


@pytest.mark.parametrize("imported", ["before simfs", "after simfs, before the world"])
def test_trio_imported_before_the_first_run_sleeps_on_the_worlds_clock(imported):
    first, second = ("import trio", "import simfs") if imported == "before simfs" else (
        "import simfs", "import trio")
    code = (f"{first}\n{second}\nimport time\n"
            "async def main():\n    await trio.sleep(5)\n    return time.monotonic()\n"
            "w = simfs.World(seed=1)\np = w.spawn(w.host('h'), trio.run, main)\nw.run()\n"
            "print(p.result(), w.now)")
    seen, now = (float(value) for value in _run(code).split())
    # Five virtual seconds, passed at once: unrouted, trio.run would sleep
    # five real seconds and leave the world's clock at 0.
    assert seen == pytest.approx(5.0) and now == pytest.approx(5.0)
