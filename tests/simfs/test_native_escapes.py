"""Native writes to the real disk from a simulated process (the seccomp guard).

A ``ctypes`` call of a function resolved before the run raises no audit
event (measured on CPython 3.11: ``ctypes.call_function`` did not fire), so
only the kernel sees ``libc.open(b"/tmp/x", O_CREAT|O_WRONLY)``.  The guard
(``simfs/_patch/_guards/_native_guard.py``) is opt-in and irrevocable for the
threads it filters, so each case runs in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from simfs._patch._guards import _native_guard

from .helpers import run_apart

_SUPPORTED = sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")

_PROGRAM = """
import ctypes, json, os, sys, threading
import simfs
from simfs._patch._registry import real_outside

libc = ctypes.CDLL(None, use_errno=True)
native_open = libc.open   # resolved before the run: no audit event when called
directory = sys.argv[1]
target = b""

def native_write():
    return native_open(target, os.O_CREAT | os.O_WRONLY, 0o644)

def in_a_thread():
    thread = threading.Thread(target=native_write, name="writer")
    thread.start()
    thread.join()

def fresh_import():
    import bz2, decimal   # C extensions not imported yet: dlopen reads real files
    return str(decimal.Decimal("1.5") + 1) + bz2.decompress(bz2.compress(b"!")).decode()

def announced_write():
    with real_outside(open)(target, "w") as real:   # simfs's own real access
        real.write("x")
    return "written"

def routed():
    import time
    with open("/shared/marker", "w") as marker:
        marker.write("ready")
    time.sleep(1)
    with open("/shared/marker") as marker:
        return marker.read()

reports = {}
for case in sys.argv[2:]:
    target = os.path.join(directory, case).encode()
    report = reports[case] = {}
    world = simfs.World(seed=7)
    host = world.host("a")
    process = world.spawn(host, globals()[case])
    try:
        world.run()   # the first world turns the guard on (unless SIMFS_NATIVE_GUARD=0)
        report["result"] = process.result()
    except simfs.SimulationEscape as error:
        report["escape"] = str(error)
    report["status"] = simfs.native_guard()
    report["baton"] = type(world._scheduler).__name__
    report["exists"] = os.path.exists(target)
    report["digest"] = world.trace.digest()
print(json.dumps(reports))
"""


_CASES = ["native_write", "in_a_thread", "fresh_import", "announced_write", "routed"]


def _run_all(directory: str, *, guard: bool, baton: str = "greenlet"
             ) -> dict[str, dict[str, object]]:
    """Every case, each in its own world, in one fresh interpreter."""
    env = dict(os.environ, SIMFS_BATON=baton)
    env["SIMFS_NATIVE_GUARD"] = "1" if guard else "0"
    out = subprocess.run([sys.executable, "-c", _PROGRAM, directory, *_CASES], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    reports: dict[str, dict[str, object]] = json.loads(out.stdout.strip().splitlines()[-1])
    return reports


# Both batons: the thread baton's processes are OS threads the spawner starts;
# the greenlet baton runs them all on one engine thread it starts.
@pytest.fixture(scope="module", params=["greenlet", "thread"])
def guarded(tmp_path_factory, request):
    return _run_all(str(tmp_path_factory.mktemp("guarded")), guard=True, baton=request.param)


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory):
    return _run_all(str(tmp_path_factory.mktemp("unguarded")), guard=False)


@pytest.mark.skipif(not _SUPPORTED, reason="the guard is wired for Linux x86_64/aarch64")
def test_a_native_open_for_writing_fails_the_run_naming_process_host_and_path(guarded):
    report = guarded["native_write"]
    assert str(report["status"]).startswith("on"), report["status"]
    escape = str(report.get("escape"))
    assert "process 'native_write' on host 'a'" in escape
    assert "openat(" in escape and "/native_write'" in escape
    assert report["exists"] is False


@pytest.mark.skipif(not _SUPPORTED, reason="the guard is wired for Linux x86_64/aarch64")
def test_the_guard_keeps_the_baton_it_is_given(guarded, request):
    # The greenlet baton (the default) stays on under the guard: its engine
    # thread is filtered, and the refusals above name the process all the same.
    asked = request.node.callspec.params["guarded"]
    expected = {"greenlet": "GreenletScheduler", "thread": "Scheduler"}[asked]
    assert {report["baton"] for report in guarded.values()} == {expected}


def test_without_the_guard_the_same_native_open_reaches_the_real_disk(unguarded):
    # The hole the guard closes: no escape, and a real file appears.
    report = unguarded["native_write"]
    assert str(report["status"]).startswith("off")
    assert "escape" not in report
    assert report["exists"] is True


@pytest.mark.skipif(not _SUPPORTED, reason="the guard is wired for Linux x86_64/aarch64")
def test_a_thread_started_by_a_simulated_process_is_guarded_too(guarded):
    report = guarded["in_a_thread"]
    assert "process 'writer' on host 'a'" in str(report.get("escape"))
    assert report["exists"] is False


@pytest.mark.skipif(not _SUPPORTED, reason="the guard is wired for Linux x86_64/aarch64")
def test_importing_a_new_c_extension_inside_a_guarded_process_still_works(guarded):
    report = guarded["fresh_import"]
    assert report.get("result") == "2.5!", report


@pytest.mark.skipif(not _SUPPORTED, reason="the guard is wired for Linux x86_64/aarch64")
def test_a_real_write_simfs_itself_announces_goes_on_under_the_guard(guarded):
    report = guarded["announced_write"]
    assert report.get("result") == "written", report
    assert report["exists"] is True


@pytest.mark.skipif(not _SUPPORTED, reason="the guard is wired for Linux x86_64/aarch64")
def test_a_routed_program_gives_the_same_trace_digest_with_the_guard_on(guarded, unguarded):
    on, off = guarded["routed"], unguarded["routed"]
    assert on.get("result") == off.get("result") == "ready"
    assert on["digest"] == off["digest"]


def test_another_architecture_is_refused_with_the_machine_named(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    why = _native_guard._install()
    assert why is not None and "riscv64" in why and "x86_64 and aarch64" in why


_STATUS = "import simfs; w = simfs.World(); print(simfs.native_guard())"


@pytest.mark.skipif(not _SUPPORTED, reason="the guard is wired for Linux x86_64/aarch64")
def test_the_guard_is_on_by_default_and_off_only_when_asked():
    env = {name: value for name, value in os.environ.items() if name != "SIMFS_NATIVE_GUARD"}
    default = run_apart(_STATUS, env=env)
    off = run_apart(_STATUS, env=env | {"SIMFS_NATIVE_GUARD": "0"})
    assert default.returncode == off.returncode == 0, default.stderr + off.stderr
    assert default.stdout.startswith("on: "), default.stdout
    assert off.stdout.startswith("off: SIMFS_NATIVE_GUARD=0"), off.stdout


def test_a_guard_setting_other_than_0_or_1_is_refused_naming_it():
    env = dict(os.environ, SIMFS_NATIVE_GUARD="yes")
    done = run_apart(_STATUS, env=env)
    assert done.returncode != 0
    assert "SIMFS_NATIVE_GUARD='yes': use 1" in done.stderr
