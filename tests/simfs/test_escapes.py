"""Nothing a simulated process does reaches the real machine unnoticed
(docs/design.md, "Unmodified code: the routes").

Each refusal must fire *before* the call creates anything real, and
``run()`` itself must report it, even when the program catches the error.
The real working directory of every test here is an empty ``tmp_path``
(``monkeypatch.chdir``), so "no real file appeared" is checked directly.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors
import safetensors.numpy

from simfs import SimulationEscape, World, native_guard

from .helpers import run_apart


@pytest.fixture
def real_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_refused(program, *args) -> SimulationEscape:
    w = World()
    w.spawn(w.host("gpu7"), program, *args, name="trainer")
    with pytest.raises(SimulationEscape) as caught:
        w.run()
    assert "'trainer'" in str(caught.value) and "'gpu7'" in str(caught.value)
    return caught.value


def _real_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_native_code_writing_a_relative_path_fails_the_run_and_no_real_file_remains(real_cwd):
    # The Rust writer itself (the original under simfs's route), as an
    # unrouted extension would call it: no audit event, no route.
    routed = safetensors.serialize_file
    rust_serialize_file = getattr(routed, "__wrapped__", routed)

    def save() -> str:
        tensors = safetensors.numpy._flatten({"w": np.zeros(2)}, [])
        rust_serialize_file(tensors, "model.safetensors")
        return "saved"

    error = _run_refused(save)
    if native_guard().startswith("on"):
        # The guard (on by default) refuses the writer's open (of its temporary
        # file beside the target, in the real cwd: the sentinel) before it acts.
        assert "native code called openat('" in str(error)
        assert "/simfs-cwd-" in str(error) and "on the real machine" in str(error)
    else:
        # Without it, the sentinel cwd catches the file after the fact.
        assert "'model.safetensors'" in str(error) and "real working directory" in str(error)
    assert list(real_cwd.iterdir()) == []


def test_a_process_that_catches_a_refusal_still_fails_the_run(real_cwd):
    def swallow() -> str:
        try:
            sqlite3.connect("jobs.db")
        except SimulationEscape:
            return "swallowed"
        return "connected"

    error = _run_refused(swallow)
    assert "sqlite3.connect('jobs.db')" in str(error)
    assert list(real_cwd.iterdir()) == []


def test_sqlite_on_a_file_is_refused_before_the_database_exists(real_cwd):
    error = _run_refused(lambda: sqlite3.connect("/shared/jobs.db"))
    assert "cannot honestly model" in str(error)
    assert list(real_cwd.iterdir()) == []


def test_an_in_memory_sqlite_database_is_not_io_and_works():
    def count() -> int:
        db = sqlite3.connect(":memory:")
        db.execute("create table t(a)")
        db.executemany("insert into t values (?)", [(1,), (2,)])
        return int(db.execute("select count(*) from t").fetchone()[0])

    w = World()
    p = w.spawn(w.host("a"), count)
    w.run()
    assert p.result() == 2


def test_fileio_of_a_relative_path_is_refused_not_read_from_the_real_directory(real_cwd):
    (real_cwd / "cfg.json").write_text('{"real": true}')
    error = _run_refused(lambda: io.FileIO("cfg.json").read())
    assert "open('cfg.json')" in str(error)


def test_a_real_json_file_outside_the_code_roots_is_refused_even_by_absolute_path(real_cwd):
    config = real_cwd / "cfg.json"
    config.write_text('{"real": true}')
    error = _run_refused(lambda: io.FileIO(str(config)).read())
    assert str(config) in str(error)


def test_os_pipe_is_refused_before_any_real_descriptor_exists():
    before = _real_fds()
    error = _run_refused(os.pipe)
    assert "os.pipe()" in str(error)
    assert _real_fds() == before


def test_spawnv_passfds_is_refused_before_a_child_starts(real_cwd):
    import multiprocessing.util

    marker = real_cwd / "child-ran"
    child = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    error = _run_refused(multiprocessing.util.spawnv_passfds, sys.executable, child, ())
    assert "spawnv_passfds" in str(error) or "os.pipe" in str(error)
    assert not marker.exists()


def test_fork_exec_is_refused_however_it_is_reached():
    import _posixsubprocess

    error = _run_refused(_posixsubprocess.fork_exec)
    assert "_posixsubprocess.fork_exec" in str(error)


@pytest.mark.parametrize("make_pool, named", [
    (lambda: multiprocessing.get_context("spawn").Pool(1), "multiprocessing.pool.Pool"),
    (lambda: multiprocessing.get_context("fork").Pool(1), "multiprocessing.pool.Pool"),
    (lambda: __import__("concurrent.futures").futures.ProcessPoolExecutor(1),
     "ProcessPoolExecutor"),
    # A Lock or RLock made in a process is its threads' lock (no process can
    # share it): tests/simfs/test_library_probes.py.  A semaphore stays refused.
    (lambda: multiprocessing.get_context("spawn").Semaphore(), "multiprocessing Semaphore"),
])
def test_process_pools_are_refused_before_a_real_process_or_semaphore_exists(make_pool, named):
    from multiprocessing import resource_tracker

    tracker_before = resource_tracker._resource_tracker._pid
    children_before = multiprocessing.active_children()
    fds_before = _real_fds()
    error = _run_refused(make_pool)
    assert named in str(error)
    assert resource_tracker._resource_tracker._pid == tracker_before
    assert multiprocessing.active_children() == children_before
    assert _real_fds() == fds_before


def test_loading_a_foreign_function_through_ctypes_is_refused_before_it_runs(real_cwd):
    import ctypes

    def create() -> int:
        return int(ctypes.CDLL(None).creat(b"made-by-libc", 0o644))

    error = _run_refused(create)
    # Loading the program itself is loading code; resolving creat in it is refused.
    assert "ctypes.dlsym(" in str(error) and "'creat'" in str(error)
    assert list(real_cwd.iterdir()) == []


def test_a_foreign_function_resolved_before_the_run_is_caught_by_the_sentinel_cwd(real_cwd):
    import ctypes

    # Resolved outside the world; CPython raises no audit event for the call.
    creat = ctypes.CDLL(None).creat

    error = _run_refused(creat, b"made-by-libc", 0o644)
    if native_guard().startswith("on"):
        assert "native code called creat(" in str(error) and "made-by-libc'" in str(error)
    else:
        assert "native code created ['made-by-libc']" in str(error)
    assert list(real_cwd.iterdir()) == []


_SENTINEL_ONLY = """
import ctypes, os, simfs
creat = ctypes.CDLL(None).creat   # resolved outside the world: no audit event for the call
w = simfs.World()
w.spawn(w.host("gpu7"), creat, b"made-by-libc", 0o644, name="trainer")
try:
    w.run()
except simfs.SimulationEscape as error:
    print(simfs.native_guard()[:4], error)
print(sorted(os.listdir(".")))
"""


def test_with_the_guard_off_the_sentinel_cwd_still_catches_a_native_relative_write(tmp_path):
    done = run_apart(_SENTINEL_ONLY, cwd=tmp_path,
                     env=dict(os.environ, SIMFS_NATIVE_GUARD="0"))
    assert done.returncode == 0, done.stderr
    escape, listing = done.stdout.splitlines()
    assert escape.startswith("off:") and "native code created ['made-by-libc']" in escape
    assert listing == "[]"


def test_mmap_of_a_real_descriptor_is_refused(tmp_path):
    import mmap

    real = tmp_path / "real.bin"
    real.write_bytes(b"x" * 4096)
    with open(real, "rb") as handle:
        fd = handle.fileno()
        error = _run_refused(lambda: mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
    assert f"mmap.mmap({fd}" in str(error)


def test_an_anonymous_mmap_is_memory_and_works():
    import mmap

    def scratch() -> bytes:
        with mmap.mmap(-1, 16) as memory:
            memory[:5] = b"hello"
            return memory[:5]

    w = World()
    p = w.spawn(w.host("a"), scratch)
    w.run()
    assert p.result() == b"hello"


def test_the_real_working_directory_is_back_after_a_run_that_failed(real_cwd):
    w = World()
    w.spawn(w.host("a"), os.pipe)
    with pytest.raises(SimulationEscape):
        w.run()
    assert os.getcwd() == str(real_cwd)


def test_an_empty_sys_path_entry_still_finds_the_programs_modules_during_a_run(
        real_cwd, monkeypatch):
    # '' means "the working directory" to the import system; during a run the
    # real one is the sentinel, so '' must stand for the original directory.
    (real_cwd / "simfs_probe_helper.py").write_text("ANSWER = 42\n")
    monkeypatch.setattr(sys, "path", ["", *sys.path])
    monkeypatch.delitem(sys.modules, "simfs_probe_helper", raising=False)

    def use_helper() -> int:
        import simfs_probe_helper

        return int(simfs_probe_helper.ANSWER)

    w = World()
    p = w.spawn(w.host("a"), use_helper)
    w.run()
    assert p.result() == 42
    assert sys.path[0] == ""
    sys.modules.pop("simfs_probe_helper", None)


# -- the import system is not the program -----------------------------------------------

_LAZY_IMPORT = """
import sys
from simfs import World, SimulationEscape
import mypkg

def lazy(name):
    module = __import__(f"mypkg.{name}", fromlist=["VALUE"])
    return module.VALUE

w = World(seed=1)
h = w.host("h")
ok = w.spawn(h, lazy, "sub")
w.run()
print("imported", ok.result())
w.spawn(h, lazy, "peeks")
try:
    w.run()
except SimulationEscape as error:
    print("refused", error)
"""


@pytest.mark.parametrize("guard", ["0", "1"])
def test_a_program_imports_its_own_submodule_for_the_first_time_inside_a_process(tmp_path,
                                                                                  guard):
    # The project under test lives in the working directory.  The import
    # system lists mypkg/ and writes mypkg/__pycache__ there; that is Python
    # loading code, not the program's I/O, and was refused as an escape.
    # A module's own code run by the import is still the program's: a real
    # listing at its top level, of a directory under /tmp that is not the
    # program's code (so the host's own local /tmp, not the machine's), is
    # refused.
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sub.py").write_text("VALUE = 42\n")
    data = tmp_path.parent / f"{tmp_path.name}-data"
    data.mkdir()
    (package / "peeks.py").write_text(f"import posix\nposix.listdir({str(data)!r})\n"
                                      "VALUE = 0\n")
    # With the native-write guard on too (SIMFS_NATIVE_GUARD=1): the kernel
    # filter must let the same __pycache__ writes through.
    environment = {key: value for key, value in os.environ.items()
                   if key != "PYTHONDONTWRITEBYTECODE"} | {"SIMFS_NATIVE_GUARD": guard}
    done = run_apart(_LAZY_IMPORT, cwd=tmp_path, env=environment)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "imported 42"
    assert lines[1].startswith("refused") and f"os.listdir({str(data)!r})" in lines[1]
    assert any(path.name.startswith("sub.") for path in (package / "__pycache__").iterdir())


# -- C dbm -----------------------------------------------------------------------------

_C_DBM = """
import os, sys, types
# A stand-in for the C module where none is built (pyenv's builds have no
# ndbm; Debian's python3 has): its open writes the path itself, as ndbm does.
fake = types.ModuleType("dbm.ndbm")
def open(path, flag="r", mode=0o666):
    raise AssertionError("the real C open ran: " + path)
fake.open = open
sys.modules["dbm.ndbm"] = fake
from simfs import World, SimulationEscape
import dbm.ndbm
w = World()
w.spawn(w.host("a"), lambda: dbm.ndbm.open("/shared/ledger", "c"))
try:
    w.run()
except SimulationEscape as error:
    print(error)
"""


def test_a_c_dbm_is_refused_before_its_library_writes_the_real_disk():
    done = run_apart(_C_DBM)
    assert done.returncode == 0, done.stderr
    assert "dbm.ndbm.open('/shared/ledger', 'c') reaches the real machine" in done.stdout
    assert "dbm.dumb" in done.stdout


# -- code inside the export ------------------------------------------------------------


def _write_plugin(directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    path = f"{directory}/plugin_in_export.py"
    with open(path, "w") as source:
        source.write("VALUE = 1\n")
    return path


def _import_through_sys_path(directory: str) -> object:
    _write_plugin(directory)
    sys.path.insert(0, directory)  # the test process's own sys.path: restored below
    try:
        import plugin_in_export  # type: ignore[import-not-found]  # noqa: F401
    finally:
        sys.path.remove(directory)
        sys.path_importer_cache.pop(directory, None)
    return "imported"


def _import_from_file(directory: str) -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("plugin", _write_plugin(directory))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(directory: str) -> object:
    import py_compile

    return py_compile.compile(_write_plugin(directory), doraise=True)


def _run_path(directory: str) -> object:
    import runpy

    return runpy.run_path(_write_plugin(directory))


def _open_code(directory: str) -> object:
    import io

    with io.open_code(_write_plugin(directory)) as source:
        return source.read()


@pytest.mark.parametrize("program", [_import_through_sys_path, _import_from_file, _compile,
                                     _run_path, _open_code])
def test_code_in_the_export_is_refused_not_looked_up_on_the_real_machine(program):
    # The import system reads modules from the real machine (its calls are
    # let through), so a module written to the simulated export would be
    # looked for at the same path on the real disk and silently not found.
    error = _run_refused(program, f"/shared/plugins-{program.__name__}")
    assert "simulated export" in str(error)
    assert f"/shared/plugins-{program.__name__}" in str(error)


# -- fork ------------------------------------------------------------------------------


def test_a_fork_inside_the_world_is_refused_however_os_fork_was_reached():
    # posix's own functions, as `from os import fork` bound before the
    # routes would hold them: no route wraps them, the audit hook refuses.
    import posix

    for fork in (posix.fork, posix.forkpty):
        error = _run_refused(fork)
        assert f"os.{fork.__name__}() is not simulated" in str(error)


def test_a_fork_outside_the_world_is_the_programs_own_call(recwarn):
    # simfs refuses a fork inside the world from its audit hook, so os.fork
    # stays the interpreter's own function: Python 3.12's warning about
    # forking a threaded process names this file, not a simfs route.
    import posix
    import threading

    world = World(seed=1)
    world.spawn(world.host("h"), lambda: None)
    world.run()  # the routes are in place
    assert os.fork is posix.fork
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    finally:
        release.set()
        other.join()
    warned = [warning for warning in recwarn.list if "fork()" in str(warning.message)]
    # Python 3.12 warns about a fork with another thread running; 3.11 does not.
    assert len(warned) == (1 if sys.version_info >= (3, 12) else 0)
    assert all(warning.filename == __file__ for warning in warned)


_FORK_AFTER_RUN = """
import os, sys, time
from simfs import World

def poll():
    os.path.exists("/shared/marker")
    time.sleep(1)

def run_a_world():
    world = World(seed=1, step_timeout=5)
    world.spawn(world.host("a"), poll)
    world.run()
    world.close()

run_a_world()  # leaves its engine thread parked for the next world
pid = os.fork()  # Python 3.12+ warns here if another thread is alive
if pid == 0:
    try:
        run_a_world()
    except BaseException as error:
        print("child:", type(error).__name__, flush=True)
        os._exit(1)
    os._exit(0)
threads = len(os.listdir("/proc/self/task"))
_, status = os.waitpid(pid, 0)
print(threads, os.waitstatus_to_exitcode(status))
"""


def test_a_fork_after_a_run_leaves_no_engine_thread_and_the_child_can_run_a_world():
    # A fork copies only the calling thread.  The greenlet baton parks its
    # engine thread between worlds; the child must not inherit an engine
    # with no thread behind it (its first world would wait on it until
    # step_timeout), and the parent must fork single-threaded, as Python
    # 3.12+ warns on every fork of a multi-threaded process.
    # The greenlet baton's engines are the subject: not the thread baton, nor
    # the opt-in native guard, whose supervisor threads stay for the process.
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("SIMFS_BATON", "SIMFS_NATIVE_GUARD")}
    done = run_apart(_FORK_AFTER_RUN, "-W", "always::DeprecationWarning", env=environment)
    assert (done.returncode, done.stdout) == (0, "1 0\n"), done.stderr
    assert "multi-threaded" not in done.stderr
