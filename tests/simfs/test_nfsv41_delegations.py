"""NFSv4.1 read delegations: what another host's costs a conflicting call.

docs/nfs-facts.md, "Read delegations", measured with
compose/probe_delegation.py (Linux 6.1 client and knfsd): while host B holds
a read delegation of a file, host A's open for write, LINK to it or RENAME
over it is answered NFS4ERR_DELAY and A's client retries after
NFS4_POLL_RETRY_MIN, 0.1 s (fs/nfs/nfs4proc.c ``nfs4_delay``): measured
0.114-0.147 s against 0.005-0.013 s with no delegation.  Truncate, chmod,
unlink and a rename of the file itself recall it without a wait
(``nfsd_wait_for_delegreturn``).  The rules are simfs/_nfs/_delegations.py.
"""

from __future__ import annotations

import os
import time

import pytest

from simfs import FaultPlan, HostCrash, ProcessFailed, World, posix

RETRY = 100_000_000  # NFS4_POLL_RETRY_MIN, 0.1 s in ns
SECOND_RETRY = RETRY + 2 * RETRY  # nfs4_delay doubles: the next try would be at 0.3 s


def _timed(call, *args) -> int:
    """Virtual nanoseconds the call took."""
    started = time.monotonic_ns()
    call(*args)
    return time.monotonic_ns() - started


def _open_write(path: str) -> None:
    os.close(os.open(path, os.O_WRONLY))


def _holder(hold: float, flags: int = os.O_RDONLY, reopen_at: float | None = None) -> None:
    fd = os.open("/shared/f", flags)
    posix.sleep(hold)
    os.close(fd)
    if reopen_at is not None:
        posix.sleep(reopen_at - hold)
        os.close(os.open("/shared/f", os.O_RDONLY))


def _world(mount: str = "vers=4.1"):
    world = World()
    world.server.write_bytes("/shared/f", b"old-data")
    return world, world.host("a", mount=mount), world.host("b", mount=mount)


def _a_call_after_b(call, *, at: float = 1.0, mount: str = "vers=4.1", b_holds: bool = True,
                    **holder) -> int:
    """How long A's ``call`` takes at ``at`` s, B having opened f at 0 (or not)."""
    world, a, b = _world(mount)

    def caller() -> int:
        posix.sleep(at)
        return _timed(call)
    if b_holds:
        world.spawn(b, _holder, holder.pop("hold", 2.0), **holder)
    took = world.spawn(a, caller)
    world.run()
    return took.result()


def _extra_wait(call, **kw) -> int:
    """A's call's time with B's delegation, less its time without one."""
    return _a_call_after_b(call, **kw) - _a_call_after_b(call, b_holds=False,
                                                        **{k: v for k, v in kw.items()
                                                           if k in ("at", "mount")})


def test_an_open_for_write_waits_the_clients_first_retry_while_another_host_holds_the_file():
    # probe_delegation.py held_open/open_wronly: 0.12, 0.124, 0.114 s; one delay event.
    extra = _extra_wait(lambda: _open_write("/shared/f"))
    assert RETRY <= extra < SECOND_RETRY


def test_the_wait_is_the_same_after_the_holder_closed_the_file():
    # after_close: B closed 0.5 s (0.114-0.131 s) and 5 s (0.128 s) before.
    assert RETRY <= _extra_wait(lambda: _open_write("/shared/f"), hold=0.5) < SECOND_RETRY
    assert RETRY <= _extra_wait(lambda: _open_write("/shared/f"), at=6.0,
                                hold=1.0) < SECOND_RETRY


def test_a_truncating_create_open_waits_too():
    # open_write_trunc_creat: 0.128, 0.13 s.
    def create_trunc() -> None:
        os.close(os.open("/shared/f", os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
    assert RETRY <= _extra_wait(create_trunc) < SECOND_RETRY


def test_a_link_to_the_file_and_a_rename_over_it_wait_too():
    # link: 0.114 s, two LINKs; rename_over: two RENAMEs and a delay event.
    def rename_over() -> None:
        with open("/shared/g", "wb") as handle:
            handle.write(b"new")
        os.rename("/shared/g", "/shared/f")
    assert RETRY <= _extra_wait(lambda: os.link("/shared/f", "/shared/f2")) < SECOND_RETRY
    assert RETRY <= _extra_wait(rename_over) < SECOND_RETRY


def test_truncate_unlink_and_rename_recall_the_delegation_without_a_wait():
    # truncate 0.027/0.021, chmod 0.018, unlink 0.019/0.014, rename 0.026/0.011 s:
    # the server waits for the return itself (nfsd_wait_for_delegreturn).  The
    # delegation is gone after: A's open for write that follows does not wait.
    for call in (lambda: os.truncate("/shared/f", 0), lambda: os.chmod("/shared/f", 0o600)):
        world, a, b = _world()

        def caller(call=call) -> tuple[int, int]:
            posix.sleep(1.0)
            return _timed(call), _timed(_open_write, "/shared/f")
        world.spawn(b, _holder, 2.0)
        took = world.spawn(a, caller)
        world.run()
        recalled, reopened = took.result()
        assert recalled < RETRY and reopened < RETRY
    assert _extra_wait(lambda: os.unlink("/shared/f")) < RETRY / 10
    assert _extra_wait(lambda: os.rename("/shared/f", "/shared/moved")) < RETRY / 10


def test_a_read_only_open_on_another_host_and_the_holders_own_open_for_write_do_not_wait():
    # open_rdonly: 0.005, 0.013 s (A gets a delegation too); holder_itself: 0.011, 0.015 s.
    assert _extra_wait(lambda: os.close(os.open("/shared/f", os.O_RDONLY))) < RETRY / 10
    world, a, b = _world()

    def holder_writes() -> int:
        fd = os.open("/shared/f", os.O_RDONLY)
        took = _timed(_open_write, "/shared/f")
        os.close(fd)
        return took
    own = world.spawn(b, holder_writes)
    world.run()
    assert own.result() < RETRY


def test_a_write_only_open_gets_no_delegation():
    # grant: B's O_WRONLY open left no delegation in knfsd's states (no readable file).
    assert _extra_wait(lambda: _open_write("/shared/f"), flags=os.O_WRONLY) < RETRY / 10


def test_a_file_made_by_an_open_that_reads_gets_no_delegation():
    # grant rdwr_creat_new_file: B's O_RDWR|O_CREAT|O_EXCL open of a new file got none.
    world = World()
    a, b = world.host("a", mount="vers=4.1"), world.host("b", mount="vers=4.1")

    def maker() -> None:
        fd = os.open("/shared/new", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        posix.sleep(2.0)
        os.close(fd)

    def caller() -> int:
        posix.sleep(1.0)
        return _timed(_open_write, "/shared/new")
    world.spawn(b, maker)
    took = world.spawn(a, caller)
    world.run()
    assert took.result() < RETRY


def test_after_a_recall_the_file_gets_no_delegation_until_knfsds_second_filter_swap():
    # after_recall: B's reopen 0.5 s and 3 s after the recall got none, and A's
    # second open for write took 0.012, 0.009 s (block_delegations).  knfsd's
    # two filters swap at a delegation check more than 30 s after the last
    # swap, and the recalled file is let go at the second swap: here B's
    # reopens at 40 s (first swap) and 75 s (second swap: a delegation again).
    # recall_block_quiet measured it on a quiet knfsd: B's reopen 35 s after
    # the recall got none, 70 s after got one.
    def holder() -> None:
        fd = os.open("/shared/f", os.O_RDONLY)
        posix.sleep(1.5)
        os.close(fd)
        for at in (2.0, 40.0, 75.0):
            posix.sleep(at - time.monotonic())
            os.close(os.open("/shared/f", os.O_RDONLY))

    def caller() -> list[bool]:
        waited = []
        for at in (1.0, 3.0, 41.0, 76.0):
            posix.sleep(at - time.monotonic())
            waited.append(_timed(_open_write, "/shared/f") >= RETRY)
        return waited

    world, a, b = _world()
    world.spawn(b, holder)
    took = world.spawn(a, caller)
    world.run()
    assert took.result() == [True, False, False, True]


def test_the_holders_client_returns_an_unused_delegation_at_its_second_lease_renewal():
    # nfs_expire_unreferenced_delegations, every 2/3 of knfsd's 90 s lease: a
    # delegation last used at 0 s is marked at 60 s, returned at 120 s
    # (measured with the VM's 10 s lease: gone 8.0-10.1 s after the close).
    assert _extra_wait(lambda: _open_write("/shared/f"), at=110.0, hold=0.5) >= RETRY
    assert _extra_wait(lambda: _open_write("/shared/f"), at=121.0, hold=0.5) < RETRY / 10


def test_over_nfsv3_another_hosts_open_never_waits():
    # No delegations over v3: the same programs take the same time.
    assert _extra_wait(lambda: _open_write("/shared/f"), mount="vers=3") == 0


def test_the_trace_shows_the_refused_attempt_as_nfs4err_delay():
    world, a, b = _world()
    world.spawn(b, _holder, 2.0)

    def caller() -> None:
        posix.sleep(1.0)
        _open_write("/shared/f")
    world.spawn(a, caller)
    world.run()
    (opened,) = world.trace.select(host="a", op="open")
    assert "NFS4ERR_DELAY" in opened.rpcs, opened.format()
    assert a.rpc_counts()["NFS4ERR_DELAY"] == 1


def test_recalling_a_crashed_hosts_delegation_is_refused_by_name_as_leases_are_not_modelled():
    # Linux: knfsd cannot reach the crashed holder, and the caller retries
    # until the holder's lease is expired; simfs has no lease, so it says so.
    world = World(faults=FaultPlan(crashes=(HostCrash(host="b", at=0.5),)))
    world.server.write_bytes("/shared/f", b"old-data")
    a, b = world.host("a", mount="vers=4.1"), world.host("b", mount="vers=4.1")
    world.spawn(b, _holder, 2.0)

    def caller() -> None:
        posix.sleep(1.0)
        _open_write("/shared/f")
    world.spawn(a, caller)
    with pytest.raises(ProcessFailed) as failed:
        world.run()
    message = str(failed.value)
    assert "crashed host 'b'" in message and "lease" in message and "host 'a'" in message


def _mixed(call):
    """B (v4.1) holds f from 0 to 2 s; A (v3) makes ``call`` at 1 s: its time in ns."""
    world = World()
    world.server.write_bytes("/shared/f", b"old-data")
    a, b = world.host("a", mount="vers=3"), world.host("b", mount="vers=4.1")
    world.spawn(b, _holder, 2.0)

    def caller() -> int:
        posix.sleep(1.0)
        return _timed(call)
    took = world.spawn(a, caller)
    world.run()
    return took.result()


def test_a_v3_hosts_unlink_recalls_without_a_wait_and_its_link_waits_the_jukebox_retry():
    # v3_caller: c (v3) unlinked B's delegated file in 0.022 and 0.060 s; its
    # LINK took 5.176 s (NFS3ERR_JUKEBOX, retried after NFS_JUKEBOX_RETRY_TIME).
    assert _mixed(lambda: os.unlink("/shared/f")) < RETRY / 10
    assert 5 * 10**9 <= _mixed(lambda: os.link("/shared/f", "/shared/f2")) < 6 * 10**9

    def rename_over() -> None:  # measured 5.159 s, two RENAMEs
        with open("/shared/g", "wb") as handle:
            handle.write(b"new")
        os.rename("/shared/g", "/shared/f")
    assert 5 * 10**9 <= _mixed(rename_over) < 6 * 10**9


def test_a_v3_hosts_write_to_a_delegated_file_is_refused_by_name():
    # Measured 5.08 s (NFS3ERR_JUKEBOX, retried after 5 s): the page cache
    # has sent the data by then, so simfs says it cannot wait instead.
    def append() -> None:
        with open("/shared/f", "ab") as handle:
            handle.write(b"-more")
    with pytest.raises(ProcessFailed) as failed:
        _mixed(append)
    assert "NFS3ERR_JUKEBOX" in str(failed.value) and "host 'b'" in str(failed.value)
