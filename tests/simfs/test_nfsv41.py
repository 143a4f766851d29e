"""NFSv4.1 and 4.2 hosts: ``vers=`` picks the measured v4 profile of the kernel.

docs/nfs-facts.md, "NFSv4.1 and 4.2": compose/probe_v41.py re-measured every
v3 fact on Linux 6.1 with two hosts, each its own NFSv4.1 client of one
knfsd.  One came out different: a file another host removes stays on the
server while this host holds it open (its OPEN state is an open file of the
exported filesystem), so fstat shows st_nlink 0 and reads get the data until
the close, where NFSv3 answers ESTALE.  Silly rename, the negative-lookup
stall, attribute timeouts, stale directories and the blocked-lock grant at
the release (CB_NOTIFY_LOCK, fs/nfs/nfs4proc.c nfs4_retry_setlk) measured as
on v3.  Versions without a measured profile are refused by name.
"""

from __future__ import annotations

import errno
import fcntl
import os

import pytest

from simfs import MountOptionError, UnknownKernel, World, posix


def _outcome(call, *args):
    try:
        result = call(*args)
    except OSError as error:
        return errno.errorcode[error.errno]
    return result


def _holder() -> tuple[object, object, object]:
    fd = os.open("/shared/f", os.O_RDONLY)
    posix.sleep(4.0)  # b removes f at 1 s; past acregmin (3 s) a asks the server
    return (_outcome(lambda: os.fstat(fd).st_nlink), _outcome(os.read, fd, 100),
            _outcome(os.close, fd))


def _remover() -> None:
    posix.sleep(1.0)
    os.unlink("/shared/f")


def _removed_while_open(mount: str) -> tuple[object, object, object]:
    world = World()
    world.server.write_bytes("/shared/f", b"content")
    a, b = world.host("a", mount=mount), world.host("b", mount=mount)
    held = world.spawn(a, _holder)
    world.spawn(b, _remover)
    world.run()
    return held.result()


def test_over_nfsv4_1_a_file_another_host_removed_stays_readable_until_the_close():
    # compose/probe_v41.py stale_open_file_removed_by_other_host, Linux 6.1:
    # a_fstat st_nlink 0, a_pread "content", close fine.
    assert _removed_while_open("vers=4.1") == (0, b"content", None)


def test_over_nfsv3_the_same_holder_gets_estale():
    # The v3 column of the same probe run: ESTALE (docs/nfs-facts.md, "Stale handles").
    assert _removed_while_open("vers=3") == ("ESTALE", "ESTALE", None)


def test_the_removed_file_goes_from_the_server_at_the_holders_close():
    def holder() -> None:
        fd = os.open("/shared/f", os.O_RDONLY)
        posix.sleep(2.0)
        os.close(fd)

    world = World()
    world.server.write_bytes("/shared/f", b"content")
    a, b = world.host("a", mount="vers=4.1"), world.host("b", mount="vers=4.1")
    world.spawn(a, holder)
    world.spawn(b, _remover)
    world.run(until=1.5)
    assert len(world._server_state.orphan_ids()) == 1  # nameless, kept for a's OPEN
    world.run()
    assert world._server_state.orphan_ids() == []


def test_over_nfsv4_1_unlinking_a_file_open_on_the_same_host_still_silly_renames():
    # probe_v41.py silly_rename: .nfs000000000000002200000001 on the server,
    # rmdir ENOTEMPTY on both hosts, gone after the close.
    def unlinker() -> tuple[list[str], str, list[str]]:
        fd = os.open("/shared/d/s", os.O_RDONLY)
        os.unlink("/shared/d/s")
        during = sorted(os.listdir("/shared/d"))
        rmdir = _outcome(os.rmdir, "/shared/d")
        os.close(fd)
        return during, rmdir, sorted(os.listdir("/shared/d"))

    world = World()
    world.server.mkdir("/shared/d")
    world.server.write_bytes("/shared/d/s", b"payload")
    process = world.spawn(world.host("a", mount="vers=4.1"), unlinker)
    world.run()
    during, rmdir, after = process.result()
    assert len(during) == 1 and during[0].startswith(".nfs")
    assert (rmdir, after) == ("ENOTEMPTY", [])


def test_over_nfsv4_1_a_blocked_flock_is_granted_at_the_release_on_6_1():
    # probe_v41.py blocked_lock_grant: 0.04-0.24 s after the release (hold 2
    # s and 10 s, flock and lockf), the CB_NOTIFY_LOCK callback; not lockd's
    # 30 s retry, not nfs4_retry_setlk_simple's growing polls.
    def hold() -> float:
        fd = os.open("/shared/lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        posix.sleep(10.0)
        released = posix.monotonic()
        os.close(fd)
        return released

    def wait() -> float:
        posix.sleep(0.5)
        fd = os.open("/shared/lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        granted = posix.monotonic()
        os.close(fd)
        return granted

    world = World()
    world.server.write_bytes("/shared/lock", b"")
    holder = world.spawn(world.host("a", mount="vers=4.1"), hold)
    waiter = world.spawn(world.host("b", mount="vers=4.1"), wait)
    world.run()
    assert waiter.result() - holder.result() < 0.01


@pytest.mark.parametrize("vers", ["4.1", "4.2"])
def test_vers_4_1_and_4_2_select_the_kernel_s_v4_profile(vers):
    world = World()
    host = world.host("a", mount=f"vers={vers},acdirmin=3")
    assert (host.kernel.vers, host.kernel.server_holds_opens) == (vers, True)
    assert host.options.vers == vers and f"vers={vers}" in host.options.format()
    assert f"NFSv{vers}" in host.kernel.differences()
    assert world.host("b", mount=f"nfsvers={vers}").kernel.vers == vers


@pytest.mark.parametrize("text", ["vers=4.0", "vers=4", "vers=2", "nfsvers=4.3"])
def test_a_version_without_a_measured_profile_is_refused_naming_the_measured_ones(text):
    with pytest.raises(MountOptionError, match=r"simfs models vers=3, vers=4\.1 and vers=4\.2"):
        World().host("a", mount=text)


def test_a_bare_vers_4_asks_for_the_minor_version():
    with pytest.raises(MountOptionError, match="settle the minor version: name it"):
        World().host("a", mount="vers=4")


def test_nfsv4_1_on_a_kernel_measured_only_over_v3_is_refused():
    with pytest.raises(UnknownKernel, match=r"kernel '6\.12' has no measured NFSv4\.1 profile "
                                            r"\(simfs has kernel='6\.1' with vers=4\.1"):
        World().host("a", mount="vers=4.1", kernel="6.12")
