"""Each host's own /proc, and logging.FileHandler across hosts.

A real host's /proc describes that host: its processes, and its NFS mount
with the options it was mounted with (the kernel lists non-default nfs(5)
options only: ``nfs_show_mount_options`` in fs/nfs/super.c).  Libraries read
it to notice forks (filelock 4: ``/proc/self/ns/pid``), to tell processes
apart (``/proc/<pid>/stat``) and to learn a path is on NFS (mountinfo).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from simfs import SimulationEscape

from .conftest import two_hosts


def read_proc() -> dict[str, object]:
    pid = os.getpid()
    mounts = Path("/proc/mounts").read_text()
    return {
        "pid": pid,
        "self": os.readlink("/proc/self"),
        "stat_pid": int(Path(f"/proc/{pid}/stat").read_text().split()[0]),
        "ns": os.stat("/proc/self/ns/pid").st_ino,
        "nfs_line": next(line for line in mounts.splitlines() if " nfs " in line),
        "mountinfo_nfs": any(" - nfs " in line
                             for line in Path("/proc/self/mountinfo").read_text().splitlines()),
    }


def test_each_host_shows_its_own_nfs_mount_and_options_in_proc():
    w, a, _ = two_hosts()
    tuned = w.host("tuned", mount="vers=3,acdirmin=3,acdirmax=3,lookupcache=positive")
    pa = w.spawn(a, read_proc)
    pt = w.spawn(tuned, read_proc)
    w.run()
    default, custom = pa.result(), pt.result()
    assert default["nfs_line"].split()[:3] == ["nfs-server:/shared", "/shared", "nfs"]
    assert "vers=3" in default["nfs_line"] and "acdirmin" not in default["nfs_line"]
    assert "acdirmin=3,acdirmax=3" in custom["nfs_line"]
    assert "lookupcache=pos" in custom["nfs_line"]
    assert default["mountinfo_nfs"] and custom["mountinfo_nfs"]


def test_proc_self_names_the_simulated_process_and_its_pid_namespace_is_stable():
    w, a, b = two_hosts()
    first, second = w.spawn(a, read_proc), w.spawn(b, read_proc)
    w.run()
    for seen in (first.result(), second.result()):
        assert seen["self"] == str(seen["pid"]) and seen["stat_pid"] == seen["pid"]
    assert first.result()["pid"] != second.result()["pid"]
    # Each process sits in its host's initial pid namespace (PROC_PID_INIT_INO).
    assert first.result()["ns"] == second.result()["ns"] == 0xEFFFFFFC


def test_another_hosts_process_is_not_in_this_hosts_proc():
    def sleeper() -> int:
        import time

        time.sleep(5)
        return os.getpid()

    def look_for(pid_box: list) -> bool:
        import time

        time.sleep(1)
        return os.path.exists(f"/proc/{pid_box[0]}/stat")

    w, a, b = two_hosts()
    box: list = []
    w.spawn(a, lambda: box.append(os.getpid()) or sleeper())
    seen = w.spawn(b, look_for, box)
    w.run()
    assert seen.result() is False


def test_writing_to_proc_is_refused():
    def write() -> None:
        with open("/proc/self/stat", "w") as handle:
            handle.write("x")

    w, a, _ = two_hosts()
    p = w.spawn(a, write)
    w.run(check=False)
    with pytest.raises(PermissionError):
        p.result()


def log_records(path: str, who: str, wait: float) -> None:
    import time

    time.sleep(wait)
    logger = logging.getLogger(f"compat.{who}")
    logger.propagate = False
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    logger.addHandler(handler)
    try:
        for n in range(3):
            logger.warning("record %d", n)
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_file_handlers_on_two_hosts_append_after_each_others_close(real_disk_untouched):
    # Close-to-open (docs/design.md, "The NFS model"): B's open for append
    # revalidates the file's size with the server, so its records land after
    # A's closed ones.
    w, a, b = two_hosts()
    w.spawn(a, log_records, "/shared/train.log", "a", 0)
    w.spawn(b, log_records, "/shared/train.log", "b", 5)
    w.run()
    lines = w.server.read_text("/shared/train.log").splitlines()
    assert lines == [f"compat.{who} record {n}" for who in "ab" for n in range(3)]
    assert real_disk_untouched()


def test_every_parent_of_a_deeper_export_is_a_local_directory_and_the_export_a_mount():
    from simfs import World

    def look() -> tuple[bool, bool, bool, bool]:
        os.makedirs("/mnt/data/runs/7", exist_ok=True)
        return (os.path.isdir("/mnt"), os.path.ismount("/mnt"), os.path.ismount("/mnt/data"),
                os.path.isdir("/mnt/data/runs/7"))

    w = World(export="/mnt/data")
    p = w.spawn(w.host("a"), look)
    w.run()
    assert p.result() == (True, False, True, True)


def test_listing_the_hosts_root_is_still_refused():
    from simfs import SimulationEscape

    w, a, _ = two_hosts()
    w.spawn(a, os.listdir, "/")
    with pytest.raises(SimulationEscape, match="listing them is not simulated"):
        w.run()


def test_the_memory_devices_behave_as_the_kernel_s_and_random_bytes_follow_the_seed():
    # drivers/char/mem.c and random.c: null swallows writes and reads as the
    # end of the file, zero reads zeros, random and urandom random bytes
    # (here the process's seeded ones); devices.txt numbers them 1,3 1,5 1,8 1,9.
    import contextlib
    import stat

    def program() -> list[object]:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            print("silenced")
        with open(os.devnull, "rb") as null:
            answers: list[object] = [null.read()]
        with open("/dev/zero", "rb") as zero, open("/dev/urandom", "rb") as urandom:
            answers += [zero.read(3), urandom.read(8)]
        for device in ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"):
            result = os.stat(device)
            answers.append((stat.S_ISCHR(result.st_mode), os.major(result.st_rdev),
                            os.minor(result.st_rdev)))
        return answers

    def run(seed: int) -> list[object]:
        w, a, _ = two_hosts(seed)
        process = w.spawn(a, program)
        w.run()
        return process.result()  # type: ignore[return-value]

    first, again, other = run(1), run(1), run(2)
    assert first[:2] == [b"", b"\0\0\0"] and len(first[2]) == 8  # type: ignore[arg-type]
    assert first[3:] == [(True, 1, 3), (True, 1, 5), (True, 1, 8), (True, 1, 9)]
    assert first == again and first[2] != other[2]


def test_a_device_opened_by_descriptor_is_refused_and_never_reaches_the_real_one():
    # /dev/null is the exception: dill opens it by descriptor at import
    # (tests/simfs/test_library_probes.py).
    w, a, _ = two_hosts()
    w.spawn(a, lambda: os.open("/dev/zero", os.O_RDONLY))
    with pytest.raises(SimulationEscape,
                       match=r"'/dev/zero'.*which a simulated host does not read"):
        w.run()
