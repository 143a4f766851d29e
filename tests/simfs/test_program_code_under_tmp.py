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
