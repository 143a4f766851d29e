"""filelock, unmodified, on two hosts of one NFS export.

``FileLock`` takes ``flock`` on its lock file; the Linux NFS client sends
``flock`` to the server's lock manager as a whole-file POSIX lock (nfs(5),
"local_lock": since 2.6.12 flock is emulated with NLM byte-range locks), so
it excludes across hosts (docs/nfs-facts.md, "Locks": a blocked lock on kernel
6.1 is granted 6-40 ms after the other host's release).  ``SoftFileLock``
creates its lock file with ``O_CREAT|O_EXCL``, which NFSv3 sends as an
exclusive CREATE (RFC 1813 §3.3.8), atomic on the server.  Either way one
holder at a time, unless the mount makes flock local (``nolock``,
``local_lock=flock|all``): then FileLock excludes only on its own host, and
SoftFileLock is the one that still holds (docs/nfs-facts.md, "Lock modes").
"""

from __future__ import annotations

import time

import filelock
import pytest

from simfs import World

from .conftest import overlaps, two_hosts

LOCKS = [filelock.FileLock, filelock.SoftFileLock]


def take_turns(lock_class, path: str, holder: str, log: list, rounds: int = 3) -> None:
    lock = lock_class(path)
    for _ in range(rounds):
        with lock:
            log.append((holder, "in", time.monotonic()))
            time.sleep(1)
            log.append((holder, "out", time.monotonic()))


@pytest.mark.parametrize("lock_class", LOCKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_filelock_excludes_the_other_host(lock_class, seed, real_disk_untouched):
    w, a, b = two_hosts(seed)
    log: list = []
    pa = w.spawn(a, take_turns, lock_class, "/shared/job.lock", "A", log)
    pb = w.spawn(b, take_turns, lock_class, "/shared/job.lock", "B", log)
    w.run(until=600)
    assert pa.result() is None and pb.result() is None
    assert len(log) == 12
    assert overlaps(log) == []
    assert real_disk_untouched()


def hold(lock_class, path: str, seconds: float) -> None:
    with lock_class(path):
        time.sleep(seconds)


def wait_in_vain(lock_class, path: str, timeout: float) -> float:
    time.sleep(1)
    started = time.monotonic()
    try:
        with lock_class(path, timeout=timeout):
            return -1.0
    except filelock.Timeout:
        return time.monotonic() - started


@pytest.mark.parametrize("lock_class", LOCKS, ids=lambda c: c.__name__)
def test_a_ten_second_timeout_against_the_other_host_costs_ten_virtual_seconds(
        lock_class, real_disk_untouched):
    w, a, b = two_hosts()
    w.spawn(a, hold, lock_class, "/shared/job.lock", 100)
    waiter = w.spawn(b, wait_in_vain, lock_class, "/shared/job.lock", 10)
    w.run()
    # filelock polls every 0.05 s and gives up on the first poll past the timeout.
    assert 10 <= waiter.result() <= 10.1
    assert real_disk_untouched()


_FIRST_IMPORT_INSIDE = """
import time
from simfs import World

def turns(holder, log):
    import filelock  # first import of filelock in this interpreter, inside the world
    lock = filelock.FileLock("/shared/job.lock")
    for _ in range(3):
        with lock:
            log.append((holder, "in", time.monotonic()))
            time.sleep(1)
            log.append((holder, "out", time.monotonic()))

w = World()
log = []
processes = [w.spawn(w.host(h), turns, h, log) for h in ("a", "b")]
w.run(until=600)
for p in processes:
    p.result()
print(repr(log))
"""


def test_filelock_imported_for_the_first_time_inside_a_process_still_excludes(tmp_path):
    # Its fork check is routed when the module loads (an import hook), not
    # only at the next run(): a fresh interpreter is the only honest setting.
    import ast
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FIRST_IMPORT_INSIDE], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    log = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert len(log) == 12 and overlaps(log) == []


def test_under_nolock_filelock_gives_no_exclusion_across_hosts_but_softfilelock_does():
    # nfs(5) "nolock": locks "provide exclusion only against other applications
    # running on this client".  Measured on Linux 6.1 (docs/nfs-facts.md, "Lock
    # modes"): with nolock, flock on one host's mount and flock on another's
    # are both granted.  FileLock is flock, so every holder is "in" at once;
    # SoftFileLock is an exclusive CREATE at the server, which no mount
    # option makes local.
    outcomes = {}
    for lock_class in LOCKS:
        w = World()
        a, b = w.host("a", mount="vers=3,nolock"), w.host("b", mount="vers=3,nolock")
        log: list = []
        pa = w.spawn(a, take_turns, lock_class, "/shared/job.lock", "A", log)
        pb = w.spawn(b, take_turns, lock_class, "/shared/job.lock", "B", log)
        w.run(until=600)
        assert pa.result() is None and pb.result() is None and len(log) == 12
        grants = [event.outcome for event in w.trace if event.op == "flock"
                  and "granted" in event.outcome]
        outcomes[lock_class] = (overlaps(log), grants)
    overlapping, grants = outcomes[filelock.FileLock]
    assert ("A", "B") in overlapping or ("B", "A") in overlapping
    # The trace says why: the grant stayed on its host.
    assert grants and all("only (nolock: no NLM, every flock and lockf lock is local to "
                          "this host" in outcome for outcome in grants)
    assert outcomes[filelock.SoftFileLock] == ([], [])
