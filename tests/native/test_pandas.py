"""pandas imported for the first time inside a simulated process, and a CSV between hosts.

pandas' first import inside a process failed with ``TypeError: __new__()
takes exactly 1 positional argument (4 given)``: its Cython module
``tslibs.nattype`` reads ``datetime.datetime`` from C while initialising
and derives ``_NaT`` from it, and inside a process that attribute was the
routed subclass (simfs/_patch/_clocks/_datetime.py; issue 30).  The import
must be the interpreter's first, so the program runs in a fresh one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .conftest import real_listing

pytestmark = pytest.mark.native

_PROGRAM = textwrap.dedent('''
    import sys, time
    import numpy  # noqa: F401  (numpy's own first import in a process is another matter)
    from simfs import World

    def write(path):
        import pandas as pd
        pd.DataFrame({"n": range(5), "s": [f"r{i}" for i in range(5)]}).to_csv(path, index=False)

    def read(path):
        import pandas as pd
        # pandas' parallel CSV reader asks the machine's cgroup for its CPU
        # quota (/sys/fs/cgroup/cpu.max), which a simulated host refuses
        # (issue 30, item 4): one worker reads without asking.
        pd.set_option("mode.max_threads", 1)
        time.sleep(1)
        frame = pd.read_csv(path)
        return frame["n"].tolist(), frame["s"].tolist()

    if __name__ == "__main__":  # the processes import this script as __mp_main__
        assert "pandas" not in sys.modules
        export = sys.argv[1]
        w = World(seed=0, export=export)
        w.server.mkdir(f"{export}/x")
        w.spawn(w.host("a"), write, f"{export}/x/t.csv")
        reader = w.spawn(w.host("b"), read, f"{export}/x/t.csv")
        w.run()
        print(reader.result())
        print(w.server.read_bytes(f"{export}/x/t.csv").decode().splitlines()[:2])
''')


def test_pandas_imported_first_in_a_process_writes_a_csv_the_other_host_reads(export, tmp_path):
    script = tmp_path / "program.py"
    script.write_text(_PROGRAM)
    done = subprocess.run([sys.executable, "-W", "ignore::Warning", str(script), str(export)],
                          capture_output=True, text=True, timeout=300, check=False,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "([0, 1, 2, 3, 4], ['r0', 'r1', 'r2', 'r3', 'r4'])", "['n,s', '0,r0']"]
    assert real_listing(export) == ["x"]
