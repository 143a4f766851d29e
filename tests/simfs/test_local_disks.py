"""Each host's local disks: /tmp, /var/tmp, the home directory and scratch mounts.

A real pod stages files on node-local disk and moves them into the shared
tree; ``tempfile`` defaults to ``/tmp``.  Before issue 24 every path outside
the export was refused, so neither worked.  Each host now has its own local
filesystems (``simfs/_nfs/_localdisk.py``): plain POSIX, seen by no other
host, listed in the host's ``/proc/mounts``, with their own ``statvfs``;
``rename`` and ``link`` between filesystems are ``EXDEV`` (measured on this
machine's Linux 6.18: ``os.rename`` and ``os.link`` from a tmpfs to an ext4
both raise ``[Errno 18] Invalid cross-device link`` naming both paths).
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from simfs import World


def _run(target, *args, world=None, **host_options):
    w = world or World(seed=5)
    process = w.spawn(w.host("gpu0", **host_options), target, *args)
    w.run()
    return w, process.result()


def test_a_file_in_one_hosts_tmp_is_not_seen_by_another_host():
    w = World(seed=1)
    a, b = w.host("a"), w.host("b")

    def stage() -> list[str]:
        Path("/tmp/adapter.bin").write_bytes(b"lora")
        return os.listdir("/tmp")

    def look() -> tuple[bool, list[str]]:
        return os.path.exists("/tmp/adapter.bin"), os.listdir("/tmp")

    staged = w.spawn(a, stage)
    w.run()
    seen = w.spawn(b, look)
    again = w.spawn(a, look)
    w.run()
    assert staged.result() == ["adapter.bin"]
    assert seen.result() == (False, [])
    assert again.result() == (True, ["adapter.bin"])
    assert not w.server.exists("/shared/adapter.bin")


def test_the_local_disks_are_in_the_hosts_proc_mounts_with_their_own_statvfs():
    def look() -> tuple[list[str], tuple[int, int], tuple[int, int]]:
        lines = Path("/proc/mounts").read_text().splitlines()
        scratch = os.statvfs("/scratch")
        shared = os.statvfs("/shared")
        return ([" ".join(line.split()[1:3]) for line in lines],
                (scratch.f_frsize, scratch.f_blocks), (shared.f_frsize, shared.f_blocks))

    mounts, scratch, shared = _run(look, local={"/scratch": "4GiB"})[1]
    assert mounts == ["/ ext4", "/proc proc", "/shared nfs", "/tmp tmpfs", "/var/tmp ext4",
                      "/root ext4", "/scratch ext4"]
    assert scratch == (4096, (4 << 30) // 4096)
    assert shared == (1 << 20, (1 << 40) >> 20)


@pytest.mark.parametrize("name", ["rename", "link"])
def test_rename_and_link_from_tmp_into_the_export_are_exdev_naming_both_paths(name):
    def cross() -> tuple[int | None, str | None, str | None, bool]:
        Path("/tmp/w.bin").write_bytes(b"w")
        try:
            getattr(os, name)("/tmp/w.bin", "/shared/w.bin")
        except OSError as error:
            return error.errno, error.filename, error.filename2, os.path.exists("/tmp/w.bin")
        return None, None, None, False

    w, result = _run(cross)
    assert result == (errno.EXDEV, "/tmp/w.bin", "/shared/w.bin", True)
    assert not w.server.exists("/shared/w.bin")


def test_shutil_move_from_tmp_copies_into_the_export_and_another_host_reads_it():
    w = World(seed=2)
    w.server.mkdir("/shared/models")
    trainer, server = w.host("trainer"), w.host("server")

    def publish() -> list[str]:
        staged = Path(tempfile.mkdtemp()) / "adapter.safetensors"
        staged.write_bytes(b"weights" * 100)
        shutil.move(str(staged), "/shared/models/adapter.safetensors")
        return os.listdir(staged.parent)

    def load() -> bytes:
        return Path("/shared/models/adapter.safetensors").read_bytes()

    left = w.spawn(trainer, publish)
    w.run()
    loaded = w.spawn(server, load)
    w.run()
    assert left.result() == []
    assert loaded.result() == b"weights" * 100
    assert w.server.read_bytes("/shared/models/adapter.safetensors") == b"weights" * 100


def test_unlinking_an_open_file_on_a_local_disk_leaves_no_nfs_file_and_the_data_readable():
    def held() -> tuple[list[str], bytes]:
        fd = os.open("/tmp/lock", os.O_CREAT | os.O_RDWR)
        os.write(fd, b"pid 7")
        os.unlink("/tmp/lock")
        names = os.listdir("/tmp")
        data = os.pread(fd, 16, 0)
        os.close(fd)
        return names, data

    assert _run(held)[1] == ([], b"pid 7")


def test_tempfile_works_unchanged_on_the_hosts_tmp():
    def use() -> tuple[str, bytes, bool, bool]:
        with tempfile.TemporaryDirectory() as directory:
            with tempfile.NamedTemporaryFile(dir=directory) as handle:
                handle.write(b"x")
                handle.flush()
                data = Path(handle.name).read_bytes()
            made = os.path.isdir(directory)
        return tempfile.gettempdir(), data, made, os.path.isdir(directory)

    assert _run(use)[1] == ("/tmp", b"x", True, False)


def test_a_local_disk_sends_no_rpc_and_takes_no_virtual_time():
    w = World(seed=1, rpc_latency=0.5)

    def write() -> float:
        Path("/var/tmp/x").write_text("x")
        return w.now

    assert _run(write, world=w)[1] == 0.0
    events = w.trace.select(process="write")
    assert [event.op for event in events][:2] == ["open", "write"]
    assert all(event.rpcs == () for event in events)


def test_the_home_directory_of_the_worlds_env_is_a_local_disk():
    def home() -> tuple[str, list[str]]:
        path = Path("~/.netrc").expanduser()
        path.write_text("machine example.com login me password pw\n")
        return str(path), os.listdir(Path.home())

    w = World(seed=1, env={"HOME": "/home/me"})
    assert _run(home, world=w)[1] == ("/home/me/.netrc", [".netrc"])


def test_the_interpreters_files_stay_readable_under_a_home_mounted_over_them():
    # This machine's interpreter is under /root/.pyenv; a home disk at the
    # installation's parent must not hide it.
    home = os.path.dirname(os.path.realpath(sys.base_prefix))
    source = os.path.realpath(os.__file__)
    if not source.startswith(os.path.realpath(sys.base_prefix) + "/"):
        source = os.path.join(sys.base_prefix, "lib")
    w = World(seed=1, env={"HOME": home})

    def read() -> bool:
        return os.path.exists(source)

    assert _run(read, world=w)[1] is True


@pytest.mark.parametrize("local, message", [
    ({"/shared/scratch": "1GiB"}, "'/shared/scratch' overlaps the export '/shared'"),
    ({"/": "1GiB"}, "a clean absolute path other than '/'"),
    ({"scratch": "1GiB"}, "a clean absolute path other than '/'"),
    ({"/tmp/fast": "1GiB"}, "'/tmp/fast' overlaps the local disk '/tmp'"),
    ({"/scratch": "4GB"}, "'4GB' is no size; write bytes as an int or a number with one of "
                          "the binary units"),
    ({"/scratch": "lots"}, "'lots' is no size"),
    ({"/scratch": 100}, "100 is smaller than one 4 KiB block"),
    ({"/proc/x": "1GiB"}, "which the host answers itself"),
])
def test_a_bad_local_mount_is_refused_naming_the_value_and_what_is_allowed(local, message):
    with pytest.raises(ValueError) as caught:
        World().host("gpu0", local=local)
    assert message in str(caught.value)


def test_a_local_mount_that_is_no_mapping_or_a_size_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match=r"local= maps mount points to sizes"):
        World().host("gpu0", local=["/scratch"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"a size is an int of bytes or a str"):
        World().host("gpu0", local={"/scratch": 4.0})  # type: ignore[dict-item]


def test_a_lock_on_a_local_file_never_meets_a_lock_on_an_export_file():
    # Locks are kept by file id; each local disk's ids are its own span,
    # so the first file of /tmp and the first of the export never collide.
    import fcntl

    w = World(seed=1)
    host = w.host("gpu0")

    def hold(path: str) -> str:
        with open(path, "w") as handle:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.stat(path)  # a yield while held: the other process runs
            return "held"

    first = w.spawn(host, hold, "/shared/a")
    second = w.spawn(host, hold, "/tmp/b")
    w.run()
    assert (first.result(), second.result()) == ("held", "held")
