"""fasteners and portalocker, unmodified, on two hosts of one NFS export.

fasteners' ``InterProcessLock`` takes ``fcntl.lockf`` (POSIX byte-range
locks, which NFSv3 sends to the server's NLM lock manager); portalocker
takes ``flock``, which the Linux NFS client emulates with the same NLM locks
(nfs(5), "local_lock").  Both exclude across hosts.  fasteners creates the
lock file's directory with ``os.makedirs(dirname, exist_ok=True)``: for a
lock file directly in the export that stats ``/``, which each host answers
as its own root (the export is a mount point on it).
"""

from __future__ import annotations

import os
import time

import fasteners
import portalocker
import pytest

from .conftest import overlaps, two_hosts


def fasteners_turns(path: str, holder: str, log: list) -> None:
    lock = fasteners.InterProcessLock(path)
    for _ in range(3):
        with lock:
            log.append((holder, "in", time.monotonic()))
            time.sleep(1)
            log.append((holder, "out", time.monotonic()))


def portalocker_turns(path: str, holder: str, log: list) -> None:
    for _ in range(3):
        with portalocker.Lock(path, timeout=60):
            log.append((holder, "in", time.monotonic()))
            time.sleep(1)
            log.append((holder, "out", time.monotonic()))


@pytest.mark.parametrize("turns", [fasteners_turns, portalocker_turns],
                         ids=["fasteners", "portalocker"])
@pytest.mark.parametrize("seed", [0, 1])
def test_a_lock_file_directly_in_the_export_excludes_the_other_host(turns, seed,
                                                                    real_disk_untouched):
    w, a, b = two_hosts(seed)
    log: list = []
    pa = w.spawn(a, turns, "/shared/job.lock", "A", log)
    pb = w.spawn(b, turns, "/shared/job.lock", "B", log)
    w.run(until=600)
    assert pa.result() is None and pb.result() is None
    assert len(log) == 12
    assert overlaps(log) == []
    assert real_disk_untouched()


def test_the_export_is_a_mount_point_below_the_hosts_own_root():
    def look() -> tuple[bool, bool, bool]:
        os.makedirs("/shared", exist_ok=True)
        return os.path.ismount("/shared"), os.path.isdir("/"), os.path.ismount("/shared/d")

    w, a, b = two_hosts()
    w.server.mkdir("/shared/d")
    p = w.spawn(a, look)
    w.run()
    assert p.result() == (True, True, False)


def hold_with_fasteners(path: str) -> None:
    with fasteners.InterProcessLock(path):
        time.sleep(100)


def fasteners_gives_up(path: str) -> tuple[bool, float]:
    time.sleep(1)
    started = time.monotonic()
    got = fasteners.InterProcessLock(path).acquire(timeout=10)
    return got, time.monotonic() - started


def hold_with_portalocker(path: str) -> None:
    with portalocker.Lock(path, timeout=1):
        time.sleep(100)


def portalocker_gives_up(path: str) -> tuple[bool, float]:
    time.sleep(1)
    started = time.monotonic()
    try:
        with portalocker.Lock(path, timeout=10):
            return True, time.monotonic() - started
    except portalocker.exceptions.LockException:
        return False, time.monotonic() - started


@pytest.mark.parametrize("hold, give_up, poll", [
    (hold_with_fasteners, fasteners_gives_up, 0.1),  # fasteners' default delay caps at 0.1 s
    (hold_with_portalocker, portalocker_gives_up, 0.25),  # portalocker's check_interval
], ids=["fasteners", "portalocker"])
def test_a_ten_second_timeout_against_the_other_host_costs_ten_virtual_seconds(
        hold, give_up, poll, real_disk_untouched):
    w, a, b = two_hosts()
    w.spawn(a, hold, "/shared/job.lock")
    waiter = w.spawn(b, give_up, "/shared/job.lock")
    w.run()
    got, waited = waiter.result()
    assert got is False
    assert 10 - poll <= waited <= 10 + poll
    assert real_disk_untouched()
