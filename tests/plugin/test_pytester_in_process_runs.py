"""Two in-process pytester runs that each run a world: simfs's routes are imported once.

pytester's in-process runs drop from ``sys.modules`` every module first
imported during them, while the routes those modules installed stay in
``os``, ``mmap``...; the next run imported them again over their own routes
and failed with "metaclass conflict" (mmap's ``SimulatedMap``), and a replay
then blamed its token.  Which tests met it depended on the order tests ran
in.  Checked in a fresh interpreter, where no earlier test imported simfs's
routes.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

OUTER = textwrap.dedent('''
    pytest_plugins = ["pytester"]

    INNER = """
    import mmap, os
    from simfs import World

    def body():
        fd = os.open("/shared/f", os.O_RDWR | os.O_CREAT)
        os.write(fd, b"x" * 4096)
        with mmap.mmap(fd, 4096) as m:
            return m[:1]

    def test_inner():
        w = World(seed=1)
        p = w.spawn(w.host("a"), body)
        w.run()
        assert p.result() == b"x"
    """

    def test_two_in_process_runs_of_a_world(pytester):
        pytester.makepyfile(test_inner=INNER)
        for _ in range(2):
            pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
''')


def test_a_world_runs_in_each_of_two_in_process_pytester_runs(tmp_path: Path) -> None:
    (tmp_path / "test_outer.py").write_text(OUTER)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "test_outer.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
