"""Other projects' own test suites, natively and inside simfs worlds: passed / native passes.

simfs is measured by the suites of the libraries people coordinate with:
every test that passes natively should pass with its body (fixtures
included) a simulated process and its ``tmp_path`` on the export, except
tests that need real processes, which must be refused loudly.  Three suites
are known (``SUITES``): filelock, fasteners, portalocker and fsspec (its
``LocalFileSystem``).

Downloads nothing.  It needs the library's source (the tests are not in the
wheels: filelock's sdist, or a checkout of fasteners' or portalocker's
repository) and the suite's own test dependencies in a directory of their
own, so they never load into this project's test runs::

    pip download --no-deps --no-build-isolation --no-binary filelock \\
        filelock==3.32.7 -d /tmp/fl        # 4.x's sdist needs a hatch hook
                                           # (python-sbom) not on PyPI here
    pip install --no-deps --target /tmp/fl/deps pytest-asyncio pytest-mock \\
        pytest-timeout
    python tests/compat/run_suite.py filelock /tmp/fl/filelock-3.32.7.tar.gz \\
        --deps /tmp/fl/deps

    # fasteners 0.20 (harlowja/fasteners at ea6fce2) and portalocker 4.1.0
    # (wolph/portalocker at 88972ef), from checkouts of their repositories:
    pip install --no-deps --target /tmp/deps diskcache eventlet more_itertools \\
        dnspython pytest-timeout pytest-rerunfailures redis fakeredis sortedcontainers
    python tests/compat/run_suite.py fasteners ~/src/fasteners --deps /tmp/deps
    python tests/compat/run_suite.py portalocker ~/src/portalocker --deps /tmp/deps

    # fsspec (fsspec/filesystem_spec at 669de5e1): test_local.py and the
    # abstract suite run against LocalFileSystem; no extra dependencies.
    python tests/compat/run_suite.py fsspec ~/src/filesystem_spec --deps /tmp/empty

The suite imports the library from the source given, so the version tested
is the source's, whatever is installed.  Prints the counts and, for each test
that passes natively but not in the world, the first line of its failure.
Not part of any test tier: the runs take minutes.

Measured with filelock 3.32.7 (the command above; 1,509 tests, 1,440 pass
natively): 1,143 of the 1,440 pass inside the world.  Re-measured on
2026-12-03 with per-process modules, local disks and the machine's
read-only files: 1,172 of 1,439 (140 + 110 + 6 loud refusals, 4 runaways,
the 7 known others below).  In the first measurement, of the 297 others,
285 are loud refusals (141 need a real process, pipe or shared memory; 109
use the SQLite ``ReadWriteLock``, refused at its ``ctypes`` setup; 32 make
symlinks, FIFOs or socket files, 26 of which pass since the export has
symlinks; 3 use ``tempfile`` without a directory,
i.e. the real ``/tmp``) and 4 are stopped as runaways (a mocked
``time.sleep`` makes the poll loop spin at one virtual instant).  The last 8:
``test_stale_inode_retry_on_unlinked_lock`` (unlinking an open file on NFS
silly-renames it, so ``st_nlink`` stays 1, docs/nfs-facts.md, "Silly rename"),
5 ``timeout=0`` tests of ``StrictSoftFileLock`` (computation takes no virtual
time, so filelock's ``0 <= timeout < elapsed`` is false after the first try and
it retries once), ``test_is_lock_held_by_us[same_pid]`` (its parameter holds
the real pid, computed at import outside the world), and one heartbeat
thread whose ``Condition.wait(timeout)`` met a ``notify`` at the same
virtual instant (a simfs bug in ``SimLock.acquire``, fixed since).

Measured on 2026-12-04 (Python 3.11): zarr 3.1.6 (zarr-developers/
zarr-python at its v3.1.6 tag, ``src/zarr/_version.py`` written by hand; run
with the native tier's venv, ``--deps`` holding pytest-asyncio and
pytest-timeout), ``tests/test_store/test_local.py``: 100 tests, 100 pass
natively, 100 inside the world.  Before zarr's loop state was made per
process (``simfs/_patch/_libraries/_native_ml.py``): 73, 12 ending in a
``Deadlock`` on the loop thread of an earlier test's process, the rest
failing after it.  ``fsspec at 669de5e1, 292 tests, 277
pass natively, 276 of the 277 inside the world; the other is a loud refusal
(``test_directories`` lists ``/``: the host's root mixes the machine's
entries with the world's mounts, so its listing would differ from machine
to machine and is not simulated).

Measured on 2026-12-03 (the commands above, Python 3.11): fasteners 0.20,
54 tests, 52 pass natively, 40 of the 52 inside the world; the other 12 are
loud refusals (7 use diskcache's SQLite, 5 start real processes).
portalocker 4.1.0, 198 tests, 173 pass natively, 162 of the 173 inside the
world; the other 11 are loud refusals (real processes, a pipe, a ``ruff``
subprocess).  Running portalocker's suite found two simfs bugs, fixed since:
a route for ``fcntl.flock`` read from the module was a ``staticmethod``
object, not the function a class gives (``FlockLocker().locker is
fcntl.flock`` failed), and a ``LOCKERS`` list built at import kept the real
builtins (the plugin now installs the routes before the suite is imported).
A third: a cycle of one test's objects finalized during the next test's
world acted on that world's descriptor of the same number (a simulated
file's ``fileno()`` now refuses in another process; the plugin also collects
garbage between tests; docs/design.md, "Objects that outlive their world").
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclass(frozen=True)
class Suite:
    """Where a library keeps its tests and its code, and how its suite runs."""

    tests: str
    code: str  # the directory to import the library from, relative to the source
    # Tests that need packages the suite does not declare in its test extra.
    ignored: tuple[str, ...] = ()
    # pytest options the suite's configuration would otherwise add (coverage
    # plugins this runner does not install).
    options: tuple[str, ...] = ()


SUITES = {
    "filelock": Suite(tests="tests", code="src", ignored=("tests/test_virtualenv.py",)),
    "fasteners": Suite(tests="tests", code="."),
    "portalocker": Suite(tests="portalocker_tests", code=".", options=("-o", "addopts=")),
    # zarr's LocalStore: the store's own tests (StoreTests run against it).
    "zarr": Suite(tests="tests/test_store/test_local.py", code="src",
                  options=("-o", "addopts=")),
    # fsspec's LocalFileSystem: its own tests, and the shared abstract suite
    # (copy, get, put, open, ls, find...) run against it.
    "fsspec": Suite(tests="fsspec/implementations/tests/test_local.py", code=".",
                    options=("-o", "addopts=", "fsspec/implementations/tests/local")),
}


def _outcomes(junit: Path) -> dict[str, str]:
    """test id -> "passed" / "failed" / "skipped", with the first failure line."""
    found: dict[str, str] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                message = (child.get("message") or child.text or "").strip().splitlines()
                outcome = "failed: " + (message[0][:160] if message else child.tag)
                break
            if child.tag == "skipped":
                outcome = "skipped"
        # A test reported twice (its phase, then the world's loud stop) failed.
        if found.get(test, "passed") == "passed" or outcome.startswith("failed"):
            found[test] = outcome
    return found


# Why a test that passes natively does not pass in the world, first match wins.
_KINDS = (
    ("refused: sqlite3/ctypes (SQLite's own file I/O and locks are native)",
     r"ctypes\.dlsym|sqlite3"),
    ("refused: needs a real process, pipe or shared memory",
     r"subprocess|os\.fork|multiprocessing|ProcessPoolExecutor|os\.pipe|/dev/shm"),
    ("refused: FIFOs and sockets are not simulated",
     r"os\.mkfifo|socket\.bind|socket\.socket"),
    ("refused: a path outside the export", r"outside the export"),
    ("stopped: a loop that never yields (a mocked sleep)", r"RunawaySimulation|BlockedOutside"),
    ("a SimulationEscape", r"SimulationEscape"),
)


def _kind(outcome: str) -> str:
    for kind, pattern in _KINDS:
        if re.search(pattern, outcome):
            return kind
    return "other: " + outcome.removeprefix("failed: ")


def _run_suite(suite: Suite, source: Path, deps: Path, junit: Path, in_world: bool,
               keyword: str | None) -> dict[str, str]:
    path = [str((source / suite.code).resolve()), str(deps)]
    command = [sys.executable, "-m", "pytest", suite.tests, "-q", "-p", "no:cacheprovider",
               "-p", "no:randomly", f"--junitxml={junit}", *suite.options]
    command += [f"--ignore={ignored}" for ignored in suite.ignored]
    if in_world:
        # This checkout's simfs, whatever the interpreter has installed (a
        # venv made for another checkout would test that one's).
        path[:0] = [str(HERE), str(ROOT)]
        command += ["-s", "-o", "timeout=0", "-p", "suite_plugin"]
    if keyword:
        command += ["-k", keyword]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    log = junit.with_suffix(".log")
    with log.open("w") as output:
        subprocess.run(command, cwd=source, env=env, stdout=output, stderr=subprocess.STDOUT,
                       check=False)
    if not junit.exists():
        raise SystemExit(f"pytest wrote no report; see {log}")
    return _outcomes(junit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=sorted(SUITES), help="whose suite to run")
    parser.add_argument("source", type=Path,
                        help="the library's sdist (*.tar.gz) or a checkout of its repository")
    parser.add_argument("--deps", type=Path, required=True,
                        help="directory with the suite's test dependencies (pip --target)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, for a subset")
    parser.add_argument("--keep", type=Path, help="directory to keep the reports and logs in")
    parser.add_argument("--native-junit", type=Path,
                        help="reuse this junit report of an earlier native run")
    args = parser.parse_args()
    suite = SUITES[args.suite]
    if not args.deps.is_dir():
        raise SystemExit(f"--deps must be a directory of test dependencies, not {args.deps}")
    work = Path(tempfile.mkdtemp(prefix=f"{args.suite}-suite-"))
    if args.source.is_file() and args.source.name.endswith(".tar.gz"):
        with tarfile.open(args.source) as archive:
            archive.extractall(work, filter="data")
        source = next(work.iterdir())
    elif (args.source / suite.tests).exists():
        source = args.source.resolve()
    else:
        raise SystemExit(f"source must be a {args.suite} sdist (*.tar.gz) or a checkout with "
                         f"{suite.tests}, not {args.source}")
    reports = args.keep or work
    reports.mkdir(parents=True, exist_ok=True)
    if args.native_junit is not None:
        native = _outcomes(args.native_junit)
    else:
        native = _run_suite(suite, source, args.deps.resolve(), reports / "native.xml", False,
                            args.keyword)
    world = _run_suite(suite, source, args.deps.resolve(), reports / "world.xml", True,
                       args.keyword)
    native_passes = [test for test, outcome in native.items() if outcome == "passed"]
    passed = [test for test in native_passes if world.get(test) == "passed"]
    print(f"{source.name}: {len(native)} tests; natively {len(native_passes)} pass")
    print(f"inside the world: {len(passed)} / {len(native_passes)} native passes pass")
    reasons = collections.Counter(_kind(world.get(test, "not run")) for test in native_passes
                                  if world.get(test) != "passed")
    for reason, count in reasons.most_common():
        print(f"{count:5d}  {reason}")
    others = [test for test in native_passes
              if world.get(test) != "passed"
              and _kind(world.get(test, "not run")).startswith("other")]
    for test in others:
        print(f"       {test}")
    extra = [test for test, outcome in world.items()
             if outcome == "passed" and native.get(test) != "passed"]
    if extra:
        print(f"{len(extra)} pass in the world but not natively: {extra[:10]}")
    print(f"reports: {reports}")


if __name__ == "__main__":
    main()
