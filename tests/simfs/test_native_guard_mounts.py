"""The guard refuses native access under a simulated mount, and never waits for the GIL.

Native code (a C/C++/Rust extension, a ``ctypes`` call) that opens or stats
a path under the export meets the real machine: where a real directory of
that name exists (as on the clusters this tool is for) it reads and writes
it, elsewhere it gets the real ENOENT, which reads like an NFS visibility
bug. With the guard on, the call fails with EACCES and the run fails with a
``SimulationEscape`` naming the process, host, call and path.

The guard's supervisor is a separate process (``_guard_helper.py``): code
that holds the GIL across its syscall (``ctypes.PyDLL``, torch's C++ writer)
hung the guard when the supervisor was a Python thread needing the GIL. Each
case runs in a fresh interpreter (the guard is irrevocable for its threads),
with a timeout so that a hang fails the test rather than the suite.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"),
    reason="the guard is wired for Linux x86_64/aarch64")

_PROGRAM = """
import ctypes, json, os, sys
import simfs

export, outside = sys.argv[1], sys.argv[2]
# Resolved before the run (resolving inside is itself refused, by the audit hook).
libc = ctypes.CDLL(None, use_errno=True)   # releases the GIL around each call
c_open, c_access, c_read = libc.open, libc.access, libc.read
held = ctypes.PyDLL(None, use_errno=True)  # keeps the GIL across each call
held_open = held.open
real_file = os.path.join(export, "real.txt").encode()

def native_read():
    fd = c_open(real_file, os.O_RDONLY)
    if fd < 0:
        return "errno " + str(ctypes.get_errno())
    buffer = ctypes.create_string_buffer(100)
    count = c_read(fd, buffer, 100)
    return "read " + buffer.raw[:count].decode()

def native_access():
    code = c_access(os.path.join(export, "real.txt").encode(), os.F_OK)
    return "errno " + str(ctypes.get_errno()) if code else "exists"

def held_gil_write_under_the_mount():
    fd = held_open(os.path.join(export, "new.bin").encode(), os.O_CREAT | os.O_WRONLY, 0o644)
    return "errno " + str(ctypes.get_errno()) if fd < 0 else "opened"

def held_gil_write_elsewhere():
    fd = held_open(os.path.join(outside, "new.bin").encode(), os.O_CREAT | os.O_WRONLY, 0o644)
    return "errno " + str(ctypes.get_errno()) if fd < 0 else "opened"

def routed():
    with open("/shared/simulated.txt", "w") as file:
        file.write("simulated")
    with open("/shared/simulated.txt") as file:
        return file.read()

reports = {}
for case in sys.argv[3:]:
    report = reports[case] = {}
    # routed runs on the default export, so that both runs' digests name the same paths.
    world = simfs.World(seed=7, **({} if case == "routed" else {"export": export}))
    process = world.spawn(world.host("a"), globals()[case])
    try:
        world.run()   # the first world turns the guard on (unless SIMFS_NATIVE_GUARD=0)
        report["result"] = process.result()
    except simfs.SimulationEscape as error:
        report["escape"] = str(error)
        report["result"] = process.result() if process.done and not process.exception() else None
    report["status"] = simfs.native_guard()
    report["digest"] = world.trace.digest()
reports["real"] = {"listing": sorted(os.listdir(export)) + sorted(os.listdir(outside))}
print(json.dumps(reports))
"""

_CASES = ["native_read", "native_access", "held_gil_write_under_the_mount",
          "held_gil_write_elsewhere", "routed"]


def _run(tmp_path, *, guard: bool, baton: str = "greenlet") -> dict[str, dict[str, object]]:
    export, outside = tmp_path / "shared", tmp_path / "outside"
    export.mkdir()
    outside.mkdir()
    (export / "real.txt").write_text("REAL")  # a real file where the export is mounted
    env = dict(os.environ, SIMFS_BATON=baton)
    env["SIMFS_NATIVE_GUARD"] = "1" if guard else "0"
    # The same cases in the same order either way: the digests are compared.
    # A guard that waited for the GIL would hang here: the timeout fails the test instead.
    out = subprocess.run([sys.executable, "-c", _PROGRAM, str(export), str(outside), *_CASES],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    reports: dict[str, dict[str, object]] = json.loads(out.stdout.strip().splitlines()[-1])
    return reports


# Both batons: the thread baton's processes are OS threads the spawner starts;
# the greenlet baton runs them all on one engine thread it starts.
@pytest.fixture(scope="module", params=["greenlet", "thread"])
def guarded(tmp_path_factory, request):
    return _run(tmp_path_factory.mktemp("guarded"), guard=True, baton=request.param)


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("unguarded"), guard=False)


def test_without_the_guard_a_native_read_under_the_export_reads_the_real_file(unguarded):
    # The hole: the simulated export has no real.txt, the real disk does.
    assert unguarded["native_read"].get("result") == "read REAL"
    assert "escape" not in unguarded["native_read"]


def test_a_native_read_under_the_export_fails_the_run_naming_process_host_call_and_path(
        guarded):
    report = guarded["native_read"]
    assert str(report["status"]).startswith("on"), report["status"]
    escape = str(report.get("escape"))
    assert "process 'native_read' on host 'a'" in escape
    assert "openat(" in escape and "/shared/real.txt'" in escape
    assert "under the simulated mount" in escape


def test_a_native_existence_check_under_the_export_fails_the_run_instead_of_a_real_answer(
        guarded):
    escape = str(guarded["native_access"].get("escape"))
    assert "process 'native_access' on host 'a'" in escape
    assert "/shared/real.txt'" in escape and "under the simulated mount" in escape


def test_native_code_holding_the_gil_gets_its_answer_under_the_export_and_nothing_is_written(
        guarded):
    report = guarded["held_gil_write_under_the_mount"]
    escape = str(report.get("escape"))
    assert "process 'held_gil_write_under_the_mount' on host 'a'" in escape
    assert "/shared/new.bin'" in escape
    assert "new.bin" not in guarded["real"]["listing"]


def test_native_code_holding_the_gil_gets_its_answer_for_a_real_write_elsewhere(guarded):
    report = guarded["held_gil_write_elsewhere"]
    escape = str(report.get("escape"))
    assert "process 'held_gil_write_elsewhere' on host 'a'" in escape
    assert "/outside/new.bin'" in escape and "on the real machine" in escape


def test_a_routed_program_gives_the_same_trace_digest_with_the_guard_watching_the_export(
        guarded, unguarded):
    on, off = guarded["routed"], unguarded["routed"]
    assert on.get("result") == off.get("result") == "simulated"
    assert on["digest"] == off["digest"]
    assert guarded["real"]["listing"] == ["real.txt"]
