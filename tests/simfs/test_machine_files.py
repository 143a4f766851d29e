"""The machine's own files stay readable inside the world, and only readable.

A program reads its installation as it runs (package data, gettext catalogs,
zone files, its own sources); none of that is coordination through shared
storage.  Before issue 24 every such read was a ``SimulationEscape``, so a
plain ``argparse.ArgumentParser()`` failed inside a process.  Now a read
outside every simulated mount is answered from the real machine, each a
trace event; a change is still an escape naming the process, host and call,
and a real file that changes during a run fails it loudly.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import zoneinfo
from collections.abc import Iterator
from pathlib import Path

import pytest

from simfs import ProcessFailed, SimulationEscape, World

HERE = Path(__file__).resolve()


@pytest.fixture
def real_dir() -> Iterator[Path]:
    """A real directory outside /tmp, /var/tmp and the home (a host's local disks)."""
    made = Path(tempfile.mkdtemp(prefix=".machine-files-", dir=HERE.parent))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _run(target, *args):
    w = World(seed=3)
    process = w.spawn(w.host("gpu0"), target, *args, name="trainer")
    w.run()
    return w, process.result()


def test_an_argument_parser_is_made_and_parses_inside_a_process():
    def parse() -> str:
        parser = argparse.ArgumentParser(prog="train")  # gettext stats its catalogs
        parser.add_argument("--steps", type=int)
        return repr(parser.parse_args(["--steps", "3"]))

    assert _run(parse)[1] == "Namespace(steps=3)"


def test_a_zone_file_of_the_tzdata_package_is_read_as_package_data():
    def offset() -> str:
        zone = zoneinfo.ZoneInfo.no_cache("Europe/Berlin")  # importlib.resources opens it
        return str(zone.utcoffset(__import__("datetime").datetime(2026, 7, 1)))

    assert _run(offset)[1] == "2:00:00"


def test_a_programs_own_source_file_reads_as_it_does_outside_the_world():
    def read() -> tuple[bytes, bool, list[str]]:
        with open(HERE, "rb") as handle:
            data = handle.read()
        return data, os.path.isfile(HERE), os.listdir(HERE.parent)

    w, (data, is_file, names) = _run(read)
    assert data == HERE.read_bytes()
    assert is_file and HERE.name in names
    # Each real call is one event of the trace, marked as the machine's.
    assert [e.outcome for e in w.trace.select(op="read")] == [f"{len(data)}B (machine)"]


def test_creating_a_file_on_the_machine_is_an_escape_naming_the_call_and_nothing_is_made(
        real_dir):
    made = real_dir / "made-in-the-world"

    def create() -> None:
        with open(made, "w") as handle:
            handle.write("x")

    with pytest.raises(SimulationEscape) as caught:
        _run(create)
    assert f"open('{made}', O_WRONLY|O_CREAT|O_TRUNC) would change the real machine" in str(
        caught.value)
    assert "'trainer'" in str(caught.value) and "'gpu0'" in str(caught.value)
    assert not made.exists()


@pytest.mark.parametrize("call, change", [
    ("os.unlink", lambda path: os.unlink(path)),
    ("os.rename", lambda path: os.rename(path, path + ".moved")),
    ("os.chmod", lambda path: os.chmod(path, 0o600)),
    ("os.utime", lambda path: os.utime(path, (0, 0))),
    ("os.mkdir", lambda path: os.mkdir(path + ".d")),
])
def test_changing_a_machine_file_is_an_escape_and_the_file_stays_as_it_was(
        real_dir, call, change):
    real = real_dir / "config.json"
    real.write_text("{}")
    before = real.stat()
    with pytest.raises(SimulationEscape, match=f"{call}.*would change the real machine"):
        _run(change, str(real))
    after = real.stat()
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)
    assert sorted(os.listdir(real_dir)) == ["config.json"]


def test_a_machine_file_that_changes_between_two_runs_of_a_world_fails_the_second(
        real_dir):
    real = real_dir / "vocab.txt"
    real.write_text("a b c")
    w = World(seed=1)
    host = w.host("gpu0")
    w.spawn(host, lambda: Path(real).read_text())
    w.run()
    real.write_text("a b c d")  # the machine changes under the world
    w.spawn(host, lambda: Path(real).read_text(), name="reader")
    with pytest.raises(SimulationEscape, match=r"'.*vocab.txt' changed during the run"):
        w.run()


@pytest.mark.parametrize("path", ["/etc/passwd", "/etc/hostname", "/etc/machine-id",
                                  "/sys/class/net"])
def test_the_machines_identity_files_are_refused_not_read(path):
    with pytest.raises(SimulationEscape, match="names the real machine or its users"):
        _run(os.stat, path)


def test_access_for_writing_a_machine_file_is_false_as_on_a_read_only_mount():
    assert _run(lambda: (os.access(HERE, os.R_OK), os.access(HERE, os.W_OK)))[1] == (
        True, False)


def test_a_missing_machine_file_is_the_real_enoent_naming_it():
    def missing() -> tuple[int | None, str | None]:
        try:
            open(HERE.parent / "no-such-file.txt")
        except OSError as error:
            return error.errno, error.filename
        return None, None

    assert _run(missing)[1] == (2, str(HERE.parent / "no-such-file.txt"))


def test_writing_to_a_descriptor_of_a_machine_file_is_ebadf_as_for_any_read_only_one():
    def write() -> int | None:
        fd = os.open(HERE, os.O_RDONLY)
        try:
            os.write(fd, b"x")
        except OSError as error:
            return error.errno
        finally:
            os.close(fd)
        return None

    assert _run(write)[1] == 9


def test_two_worlds_that_read_the_same_machine_files_have_the_same_trace():
    def read() -> int:
        return len(Path(HERE).read_bytes()) + len(os.listdir(HERE.parent))

    digests = {_run(read)[0].trace.digest() for _ in range(2)}
    assert len(digests) == 1


def test_a_failure_inside_reading_a_machine_file_names_the_process():
    with pytest.raises(ProcessFailed, match="IsADirectoryError"):
        _run(lambda: open(HERE.parent).read())
