"""pandas, zarr, datasets, tqdm and torch imported for the first time inside a process.

Each program runs in a fresh interpreter, so the import inside the simulated
process is the interpreter's first, and uses the library on a file of the
simulated export from two hosts.  Before issue 30 each failed for reasons
that had nothing to do with NFS: pandas' ``read_csv`` read the machine's
``/sys/fs/cgroup/cpu.max``; zarr and datasets import fsspec, which looks up
``ctypes.pythonapi.PyBytes_FromStringAndSize``; tqdm's first bar made a
``multiprocessing.RLock``; torch's import loads ``libtorch_global_deps.so``
with ctypes, its serialization route re-imported torch with routing off and
hung on Python's module lock, and dill (which torch and datasets import)
opens ``os.devnull`` with ``os.open``; datasets imports trio, which asks
``ctypes.util.find_library`` (``ldconfig -p``, a subprocess) for libpthread.

zarr runs its I/O on an event loop in a thread of its own: inside a process
that thread is a simulated thread, and the loop waits on the world's clock.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from .conftest import real_listing

pytestmark = pytest.mark.native

_HEAD = '''
import os, sys, time
from simfs import World

LIBRARY = sys.argv[2]
'''

_TAIL = '''
if __name__ == "__main__":  # the processes import this script as __mp_main__
    export = sys.argv[1]
    if sys.argv[3:] == ["used-before"]:
        # The library has run in the test process first (zarr: its loop
        # thread there is a real thread, started outside the world).
        before(os.path.dirname(export) + "/before")
    assert LIBRARY not in sys.modules or sys.argv[3:] == ["used-before"]
    w = World(seed=0, export=export, step_timeout=300, shared_modules=SHARED)
    w.server.mkdir(f"{export}/x")
    w.spawn(w.host("a"), write, f"{export}/x")
    reader = w.spawn(w.host("b"), read, f"{export}/x")
    w.run()
    print(reader.result())
'''

_PROGRAMS = {
    "pandas": '''
SHARED = ()

def write(d):
    import pandas as pd
    pd.DataFrame({"n": range(4)}).to_csv(d + "/t.csv", index=False)

def read(d):
    time.sleep(1)
    import pandas as pd
    return pd.read_csv(d + "/t.csv")["n"].tolist()  # its default: parallel, sized by cgroup
''',
    "zarr": '''
SHARED = ()

def before(d):
    import zarr
    zarr.open_array(d, mode="w", shape=(2,), dtype="i4")[:] = [7, 7]

def write(d):
    import zarr
    zarr.open_array(d + "/acts.zarr", mode="w", shape=(4,), dtype="i4")[:] = [0, 1, 2, 3]

def read(d):
    time.sleep(1)
    import zarr
    return zarr.open_array(d + "/acts.zarr", mode="r")[:].tolist()
''',
    "tqdm": '''
SHARED = ()

def write(d):
    from tqdm import tqdm
    for i in tqdm(range(4)):
        with open(f"{d}/part{i}", "w") as f:
            f.write(str(i))

def read(d):
    time.sleep(1)
    from tqdm import tqdm
    return [int(open(f"{d}/part{i}").read()) for i in tqdm(range(4))]
''',
    "torch": '''
SHARED = ()

def write(d):
    import torch
    with open(d + "/t.pt", "wb") as f:  # a file object: Python's own I/O
        torch.save(torch.arange(4), f)

def read(d):
    time.sleep(1)
    import torch
    with open(d + "/t.pt", "rb") as f:
        return torch.load(f).tolist()
''',
    "datasets": '''
# datasets registers pyarrow extension types and pickles with dill: one copy
# per interpreter, as pyarrow's registry is (World.shared_modules).
SHARED = ("datasets", "dill", "multiprocess")

def write(d):
    import datasets
    datasets.Dataset.from_dict({"n": [0, 1, 2, 3]}).save_to_disk(d + "/ds")

def read(d):
    time.sleep(1)
    import json
    with open(d + "/ds/dataset_info.json") as f:  # the reader's own look, in Python
        info = json.load(f)
    return sorted(info["features"]), sorted(os.listdir(d + "/ds"))
''',
}

_EXPECTED = {
    "pandas": "[0, 1, 2, 3]",
    "zarr": "[0, 1, 2, 3]",
    "tqdm": "[0, 1, 2, 3]",
    "torch": "[0, 1, 2, 3]",
    "datasets": "(['n'], ['data-00000-of-00001.arrow', 'dataset_info.json', 'state.json'])",
}


def _run(tmp_path, export, library: str, *extra: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / f"{library}_program.py"
    script.write_text(textwrap.dedent(_HEAD + _PROGRAMS[library] + _TAIL))
    return subprocess.run([sys.executable, "-W", "ignore::Warning", str(script), str(export),
                           library, *extra], capture_output=True, text=True, timeout=600,
                          check=False, cwd=tmp_path)


@pytest.mark.parametrize("library", sorted(_PROGRAMS))
def test_a_library_imported_first_in_a_process_writes_what_the_other_host_reads(
        export, tmp_path, library):
    done = _run(tmp_path, export, library)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == _EXPECTED[library]
    assert real_listing(export) == ["x"]  # nothing reached the real export


def test_zarr_used_in_the_test_process_first_still_writes_only_the_simulated_export(
        export, tmp_path):
    # The case: zarr's loop thread in the test process is real; a
    # process's zarr is its own copy, with its own loop thread, simulated.
    done = _run(tmp_path, export, "zarr", "used-before")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "[0, 1, 2, 3]"
    assert real_listing(export) == ["x"]


_WARNINGS_AS_ERRORS = '''
import torch  # noqa: F401  (torch.distributed.reduce_op warns when read)
from simfs import World

def write(path):
    with open(path, "w") as f:
        f.write("x")

if __name__ == "__main__":
    w = World(seed=0)
    w.spawn(w.host("a"), write, "/shared/a")
    w.spawn(w.host("b"), write, "/shared/b")
    w.run()
    print(sorted(w.server.listdir("/shared")))
'''


def test_the_first_world_with_torch_imported_runs_under_warnings_as_errors(tmp_path):
    # simfs's scans read torch's modules: a FutureWarning raised from them
    # failed the first World.spawn under -W error (issue 30, item 5).
    script = tmp_path / "warnings_program.py"
    script.write_text(_WARNINGS_AS_ERRORS)
    done = subprocess.run([sys.executable, "-W", "error", str(script)], capture_output=True,
                          text=True, timeout=600, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "['a', 'b']"
