"""Lock modes: which locks reach other hosts under ``nolock`` and ``local_lock=``.

nfs(5), "lock"/"nolock" and "local_lock": a local lock "provides exclusion
only against other applications running on the same client".  fs/nfs/file.c
``nfs_flock``/``nfs_lock`` take it with ``locks_lock_file_wait`` on the
host's own inode instead of an NLM call; the kernel keeps flock and POSIX
locks in separate lists (``flc_flock``, ``flc_posix``), so a local flock and
a local lockf never meet, while through NLM the server sees both as POSIX
locks and they conflict.

MEASURED is the table measured on Linux 6.1 (Debian 6.1.0-57) against knfsd
in the VM, two ``nosharecache`` mounts per mode standing for two hosts: one
process holds an exclusive lock, another then tries a non-blocking one
(``compose/probe_lock_modes.py``; docs/nfs-facts.md, "Lock modes"):

    python compose/vm.py run --memory 6G --host none1=vers=3 --host none2=vers=3 \\
        --host nolock1=vers=3,nolock ... --out OUT -- python3 compose/probe_lock_modes.py
"""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from simfs import FaultPlan, HostCrash, MountOptionError, MountOptions, World
from simfs._nfs._locks import UnmodelledLease

MOUNTS = {"none": "vers=3", "nolock": "vers=3,nolock", "flock": "vers=3,local_lock=flock",
          "posix": "vers=3,local_lock=posix", "all": "vers=3,local_lock=all"}
# case: (holder's call, tester's call, tester on the holder's host?)
CASES = {
    "flock-vs-flock-other-host": ("flock", "flock", False),
    "lockf-vs-lockf-other-host": ("lockf", "lockf", False),
    "flock-vs-lockf-other-host": ("flock", "lockf", False),
    "flock-vs-flock-same-host": ("flock", "flock", True),
    "lockf-vs-lockf-same-host": ("lockf", "lockf", True),
    "flock-vs-lockf-same-host": ("flock", "lockf", True),
}
# The VM's answer for the tester, per mode and case (lock_modes.json, verbatim
# but for the "holder granted, other" prefix every case had).
MEASURED = {
    "none": {"flock-vs-flock-other-host": "refused", "lockf-vs-lockf-other-host": "refused",
             "flock-vs-lockf-other-host": "refused", "flock-vs-flock-same-host": "refused",
             "lockf-vs-lockf-same-host": "refused", "flock-vs-lockf-same-host": "refused"},
    "nolock": {"flock-vs-flock-other-host": "granted", "lockf-vs-lockf-other-host": "granted",
               "flock-vs-lockf-other-host": "granted", "flock-vs-flock-same-host": "refused",
               "lockf-vs-lockf-same-host": "refused", "flock-vs-lockf-same-host": "granted"},
    "flock": {"flock-vs-flock-other-host": "granted", "lockf-vs-lockf-other-host": "refused",
              "flock-vs-lockf-other-host": "granted", "flock-vs-flock-same-host": "refused",
              "lockf-vs-lockf-same-host": "refused", "flock-vs-lockf-same-host": "granted"},
    "posix": {"flock-vs-flock-other-host": "refused", "lockf-vs-lockf-other-host": "granted",
              "flock-vs-lockf-other-host": "granted", "flock-vs-flock-same-host": "refused",
              "lockf-vs-lockf-same-host": "refused", "flock-vs-lockf-same-host": "granted"},
    "all": {"flock-vs-flock-other-host": "granted", "lockf-vs-lockf-other-host": "granted",
            "flock-vs-lockf-other-host": "granted", "flock-vs-flock-same-host": "refused",
            "lockf-vs-lockf-same-host": "refused", "flock-vs-lockf-same-host": "granted"},
}


def _take(fd: int, call: str, flags: int) -> None:
    if call == "flock":
        fcntl.flock(fd, flags)
    else:
        fcntl.lockf(fd, flags)


def hold(path: str, call: str, seconds: float) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    _take(fd, call, fcntl.LOCK_EX)
    time.sleep(seconds)
    os.close(fd)


def try_once(path: str, call: str) -> str:
    time.sleep(1)
    fd = os.open(path, os.O_RDWR)
    try:
        _take(fd, call, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return "refused"
    finally:
        os.close(fd)
    return "granted"


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", MOUNTS)
def test_each_lock_mode_shares_across_hosts_exactly_the_locks_measured_on_linux(mode, case):
    held, tried, same_host = CASES[case]
    world = World()
    a = world.host("a", mount=MOUNTS[mode])
    b = a if same_host else world.host("b", mount=MOUNTS[mode])
    world.spawn(a, hold, "/shared/job.lock", held, 5)
    tester = world.spawn(b, try_once, "/shared/job.lock", tried)
    world.run()
    assert tester.result() == MEASURED[mode][case]


def test_a_local_lock_blocks_a_waiter_on_its_own_host_until_released():
    world = World()
    a = world.host("a", mount="vers=3,nolock")

    def wait_for_it(path: str) -> float:
        time.sleep(1)
        fd = os.open(path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        granted = time.monotonic()
        os.close(fd)
        return granted

    world.spawn(a, hold, "/shared/job.lock", "flock", 5)
    waiter = world.spawn(a, wait_for_it, "/shared/job.lock")
    world.run()
    assert waiter.result() == 5.0  # the holder's close at 5 s wakes it at once


def test_the_trace_says_a_nolock_grant_stayed_on_its_host():
    world = World()
    a = world.host("a", mount="vers=3,nolock")
    b = world.host("b", mount="vers=3,nolock")
    world.spawn(a, hold, "/shared/job.lock", "flock", 5)
    world.spawn(b, try_once, "/shared/job.lock", "flock")
    world.run()
    grants = [event for event in world.trace if event.op == "flock"]
    assert [event.host for event in grants] == ["a", "b"]
    for event in grants:
        assert f" granted on {event.host} only (nolock: no NLM" in event.outcome
        assert "other hosts neither see it nor wait for it" in event.outcome


def test_explain_shows_where_each_lock_on_a_path_is_held():
    world = World()
    a = world.host("a", mount="vers=3,local_lock=flock")
    b = world.host("b")
    world.spawn(a, hold, "/shared/a.lock", "flock", 5)
    world.spawn(b, hold, "/shared/b.lock", "flock", 5)
    world.run(until=2)
    local = world.explain("/shared/a.lock")
    shared = world.explain("/shared/b.lock")
    world.close()
    assert ("lock: a: flock exclusive lock, whole file, held on a only (local_lock=flock: "
            "flock locks are local to this host") in local
    assert ("lock: b: flock exclusive lock, whole file, held by the server's lock manager "
            "(NLM): other hosts wait for it") in shared


def test_a_crashed_hosts_local_locks_go_with_it_while_its_nlm_locks_stay():
    world = World(faults=FaultPlan(crashes=(HostCrash(host="a", at=2.0),)))
    a = world.host("a", mount="vers=3,local_lock=flock")
    world.spawn(a, hold, "/shared/local.lock", "flock", 100)
    world.spawn(a, hold, "/shared/nlm.lock", "lockf", 100)
    world.run(until=3)
    local = world.explain("/shared/local.lock")
    nlm = world.explain("/shared/nlm.lock")
    world.close()
    assert "lock:" not in local
    assert "lock: a: posix exclusive lock" in nlm


def _try_after(path: str, call: str, seconds: float) -> str:
    time.sleep(seconds)
    return try_once(path, call)


def _wait_for(path: str, call: str) -> str:
    time.sleep(1)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    _take(fd, call, fcntl.LOCK_EX)
    os.close(fd)
    return "granted"


@pytest.mark.parametrize("call", ["flock", "lockf"])
@pytest.mark.parametrize("late", [True, False], ids=["asked after the crash",
                                                   "waiting at the crash"])
def test_a_lock_an_nfsv4_host_held_when_it_crashed_is_refused_by_name_not_held_forever(
        call, late):
    # Over v4 the lock lapses with the crashed client's lease (90 s by
    # default), which simfs does not model: a request it decides is refused
    # by name, never answered "held" for good (the v3 test above: NLM keeps it).
    world = World(faults=FaultPlan(crashes=(HostCrash(host="a", at=2.0),)))
    a = world.host("a", mount="vers=4.1")
    b = world.host("b", mount="vers=4.1")
    world.spawn(a, hold, "/shared/job.lock", call, 100)
    asker = (world.spawn(b, _try_after, "/shared/job.lock", call, 3) if late
             else world.spawn(b, _wait_for, "/shared/job.lock", call))
    world.run(check=False, until=10)
    error = asker.exception()
    world.close()
    assert isinstance(error, UnmodelledLease), error
    assert "host 'b' asks for a lock" in str(error) and "'a' held when it crashed" in str(error)


def test_over_nfsv3_a_crashed_hosts_lock_is_still_held_for_another_host():
    world = World(faults=FaultPlan(crashes=(HostCrash(host="a", at=2.0),)))
    a = world.host("a", mount="vers=3")
    b = world.host("b", mount="vers=3")
    world.spawn(a, hold, "/shared/job.lock", "lockf", 100)
    asker = world.spawn(b, _try_after, "/shared/job.lock", "lockf", 3)
    world.run(until=10)
    result = asker.result()
    world.close()
    assert result == "refused"


@pytest.mark.parametrize("text, named", [
    ("vers=4.1,local_lock=flock", "local_lock=flock"),
    ("vers=4.2,nolock", "nolock"),
    ("nolock,vers=4", "nolock"),
])
def test_a_local_lock_mode_on_nfsv4_is_refused_as_the_kernel_ignores_it(text, named):
    # nfs_fs_context_validate clears NONLM and both LOCAL flags for v4;
    # measured: vers=4.1,local_lock=flock and vers=4.1,nolock mount, and
    # /proc/mounts shows local_lock=none for both.
    with pytest.raises(MountOptionError, match="NFSv4 has no local lock modes") as caught:
        MountOptions.parse(text)
    assert caught.value.option == named


def test_local_lock_none_on_nfsv4_passes_the_lock_mode_check():
    # Every v4 line of /proc/mounts ends in local_lock=none.
    options = MountOptions.parse("vers=4.1,local_lock=none")
    assert (options.vers, options.lock, options.local_lock) == ("4.1", True, "none")


@pytest.mark.parametrize("text, named, problem", [
    ("vers=3,local_lock=both", "local_lock=both", "unknown local_lock mode 'both'"),
    ("vers=3,nolock,local_lock=none,local_lock=posix", "local_lock=posix", "nolock "
     "followed by local_lock=posix"),
    ("vers=3,nolock,local_lock=none", "local_lock=none", "nolock followed by "
     "local_lock=none"),
])
def test_a_bad_lock_mode_is_refused_by_name(text, named, problem):
    with pytest.raises(MountOptionError) as caught:
        MountOptions.parse(text)
    assert caught.value.option == named
    assert problem in str(caught.value)


@pytest.mark.parametrize("text, mode, lock", [
    ("local_lock=flock,local_lock=posix", "all", True),  # Opt_local_lock adds its flag
    ("local_lock=all,local_lock=none", "none", True),
    ("nolock", "all", False),
    ("nolock,lock", "none", True),
    ("nolock,local_lock=all", "all", False),  # a nolock line of /proc/mounts
    ("nolock,local_lock=flock", "all", False),  # flock's flag was set already
])
def test_lock_options_combine_left_to_right_as_the_kernel_sets_its_flags(text, mode, lock):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = MountOptions.parse(text)
    assert (options.local_lock, options.lock) == (mode, lock)


def test_a_lockf_test_sees_only_its_own_hosts_locks_when_posix_locks_are_local():
    # fs/nfs/file.c do_getlk: posix_test_lock on the host's own inode, then,
    # for a local mount, "no conflict" without asking the server.
    def probe(path: str) -> str:
        time.sleep(1)
        fd = os.open(path, os.O_RDWR)
        try:
            os.lockf(fd, os.F_TEST, 0)
        except OSError:
            return "locked"
        finally:
            os.close(fd)
        return "unlocked"

    seen = {}
    for mode in ("none", "posix"):
        world = World()
        a = world.host("a", mount=MOUNTS[mode])
        b = world.host("b", mount=MOUNTS[mode])
        world.spawn(a, hold, "/shared/job.lock", "lockf", 5)
        other = world.spawn(b, probe, "/shared/job.lock")
        same = world.spawn(a, probe, "/shared/job.lock")
        world.run()
        seen[mode] = (other.result(), same.result())
    assert seen == {"none": ("locked", "locked"), "posix": ("unlocked", "locked")}
