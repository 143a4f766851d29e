"""The program's own code stays the machine's even where a host has a local disk.

CI clones the project under /tmp, where every simulated host has its own
local tmpfs: the program's modules, which each process imports afresh, and
its data files next to them must still be read from the real checkout, while
any other path under /tmp is the host's empty local disk.
"""

from __future__ import annotations

import sys

from simfs import World


def _read(path: str) -> str:
    with open(path) as source:
        return source.read()


def _exists(path: str) -> bool:
    import os

    return os.path.exists(path)


def test_a_directory_on_sys_path_under_tmp_is_read_from_the_machine(tmp_path, monkeypatch):
    assert str(tmp_path).startswith("/tmp/")
    code = tmp_path / "code"
    code.mkdir()
    (code / "weights.txt").write_text("real")
    (tmp_path / "elsewhere.txt").write_text("real too")
    monkeypatch.setattr(sys, "path", [str(code), *sys.path])
    w = World(seed=1)
    a = w.host("a")
    reader = w.spawn(a, _read, str(code / "weights.txt"))
    other = w.spawn(a, _exists, str(tmp_path / "elsewhere.txt"))
    w.run()
    assert reader.result() == "real"
    assert other.result() is False  # the host's own /tmp has no such file


def _write(path: str) -> None:
    with open(path, "w") as target:
        target.write("x")


def test_a_program_started_from_tmp_still_writes_to_the_hosts_own_tmp(monkeypatch):
    # A script run with /tmp as its working directory (simfs imported from
    # there) or lying directly in /tmp must not make all of /tmp the
    # machine's read-only files: only the script is the program's code.
    from simfs._os import _machinefiles

    monkeypatch.setattr(_machinefiles, "_PROJECT", "/tmp")
    monkeypatch.setattr(sys, "path", ["/tmp", *sys.path])
    w = World(seed=1)
    writer = w.spawn(w.host("a"), _write, "/tmp/scratch.txt")
    w.run()
    assert writer.result() is None
    assert "/tmp/" not in _machinefiles.installation_roots()


def test_a_write_into_the_programs_code_under_tmp_names_the_code_root(tmp_path, monkeypatch):
    from simfs import SimulationEscape

    code = tmp_path / "code"
    code.mkdir()
    monkeypatch.setattr(sys, "path", [str(code), *sys.path])
    w = World(seed=1)
    writer = w.spawn(w.host("a"), _write, str(code / "out.txt"))
    try:
        w.run()
    except SimulationEscape as escape:
        message = str(escape)
    else:
        raise AssertionError(f"writing into {code} was not refused: {writer!r}")
    assert f"{code} holds the program's own code" in message
    assert "outside the simulated mounts" not in message
