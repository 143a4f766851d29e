"""Dentry and attribute caching: the negative-lookup stall of seed 000 and its cures.

Facts pinned here are docs/nfs-facts.md, "Attribute and dentry caches",
measured on a Linux 6.1 NFSv3 client with knfsd: a name created on host A stays
invisible to host B's ``exists()`` until B's cached attributes of the parent
expire, acdirmin after B's *first* lookup; opening the directory
(close-to-open) revalidates it.

Here ``t`` is made on the server before B's first walk: that walk sends
ACCESS for ``/shared`` first, whose post-op attributes show ``t``'s
creation (``nfs3_proc_access`` -> ``nfs_refresh_inode``), so the LOOKUP of
``t`` after it verifies and B's first lookup, at 0, is the one that caches
"not found" (measured with fresh mounts, docs/nfs-facts.md: "A directory
made before or after the mount").
"""

import os

import pytest

from simfs import posix

from .helpers import POLL, create_marker, poll_until_seen, two_hosts

MARKER = "/shared/t/marker"


@pytest.mark.parametrize("created_at", [0.2, 1.0, 1.95])
def test_a_negative_entry_outlives_the_file_until_acdirmin_expires(created_at):
    world, a, b = two_hosts()
    world.server.mkdir("/shared/t")
    writer = world.spawn(a, create_marker, MARKER, created_at)
    poller = world.spawn(b, poll_until_seen, MARKER)
    world.run()
    assert writer.result() == pytest.approx(created_at)
    # The lookup at 0 (see the module docstring) cached "not found"; the
    # parent's attributes, read then, expire acdirmin = 30 s later.
    assert poller.result() == pytest.approx(30.0)


def test_short_acdirmin_shortens_the_stall_to_acdirmin():
    world, a, b = two_hosts("vers=3,acdirmin=3,acdirmax=3")
    world.server.mkdir("/shared/t")
    world.spawn(a, create_marker, MARKER, 1.2)
    poller = world.spawn(b, poll_until_seen, MARKER)
    world.run()
    assert poller.result() == pytest.approx(3.0)  # acdirmin after the lookup at 0


def test_opening_the_parent_directory_revalidates_it_within_one_poll():
    world, a, b = two_hosts()
    world.server.mkdir("/shared/t")
    world.spawn(a, create_marker, MARKER, 1.25)
    poller = world.spawn(b, poll_until_seen, MARKER, revalidate=("/shared/t",))
    world.run()
    assert 1.25 <= poller.result() <= 1.25 + POLL
    # Close-to-open: every open after the first LOOKUP sent a GETATTR.
    opens = world.trace.select(host="b", op="open", path="/shared/t")
    assert "LOOKUP" in opens[0].rpcs
    assert len(opens) > 5 and all("GETATTR" in event.rpcs for event in opens[1:])


def test_when_the_parent_does_not_exist_yet_opening_it_fails_from_cache():
    def make_both(at):
        posix.sleep(at)
        posix.mkdir("/shared/t")
        return create_marker(MARKER, 0)

    world, a, b = two_hosts()
    world.spawn(a, make_both, 1.0)
    poller = world.spawn(b, poll_until_seen, MARKER, revalidate=("/shared/t",))
    world.run()
    # The open of the missing step dir answers ENOENT from the cached negative
    # entry, without asking the server (docs/nfs-facts.md, "Attribute and
    # dentry caches"), so it cannot help.
    failed = [e for e in world.trace.select(host="b", op="open", path="/shared/t")
              if e.outcome == "ENOENT"]
    assert failed and all(event.rpcs == () for event in failed[1:])
    assert poller.result() == pytest.approx(30.0)


def test_when_the_parent_does_not_exist_yet_opening_the_grandparent_is_what_helps():
    def make_both(at):
        posix.sleep(at)
        posix.mkdir("/shared/t")
        return create_marker(MARKER, 0)

    world, a, b = two_hosts()
    world.spawn(a, make_both, 1.0)
    poller = world.spawn(b, poll_until_seen, MARKER, revalidate=("/shared", "/shared/t"))
    world.run()
    assert 1.0 <= poller.result() <= 1.0 + POLL


@pytest.mark.parametrize("mode", ["positive", "pos", "none"])
def test_lookupcache_positive_never_trusts_a_negative_entry(mode):
    world, a, b = two_hosts(f"vers=3,lookupcache={mode}")
    world.server.mkdir("/shared/t")
    world.spawn(a, create_marker, MARKER, 0.55)
    poller = world.spawn(b, poll_until_seen, MARKER)
    world.run()
    assert 0.55 <= poller.result() <= 0.55 + POLL
    # nfs(5): with negative caching off, every miss asks the server.
    misses = [e for e in world.trace.select(host="b", op="stat") if e.outcome == "ENOENT"]
    assert misses and all("LOOKUP" in event.rpcs for event in misses)


def test_a_cached_positive_entry_hides_a_removal_until_acregmin():
    def remove_at(path, at):
        posix.sleep(at)
        posix.unlink(path)

    def poll_until_gone(path):
        while posix.exists(path):
            posix.sleep(POLL)
        return posix.monotonic()

    world, a, b = two_hosts()
    world.server.write_bytes("/shared/f", b"x")
    world.spawn(a, remove_at, "/shared/f", 1.0)
    poller = world.spawn(b, poll_until_gone, "/shared/f")
    world.run()
    # B keeps the file's attributes for acregmin (3 s) after its lookup at
    # 0; the GETATTR then meets ESTALE and a fresh LOOKUP finds nothing.
    assert poller.result() == pytest.approx(3.0)


def _getattr_times(world, host):
    return [round(e.time, 3) for e in world.trace.select(host=host, op="stat")
            if "GETATTR" in e.rpcs]


def _poll_stat(path, until, every=0.5):
    while posix.monotonic() < until:
        posix.stat(path)
        posix.sleep(every)


def test_an_unchanged_directory_attribute_timeout_doubles_up_to_acdirmax():
    world, _, b = two_hosts("vers=3,acdirmin=3,acdirmax=20")
    world.spawn(b, _poll_stat, "/shared", 70)
    world.run()
    # Mounted at 0 with timeout 3; each expiry that finds nothing changed
    # doubles it (3, 6, 12, then capped at 20): docs/design.md, "The NFS
    # model", nfs(5) acdirmax.
    assert _getattr_times(world, "b") == [3.0, 9.0, 21.0, 41.0, 61.0]


def test_a_change_resets_the_attribute_timeout_to_acdirmin():
    world, a, b = two_hosts("vers=3,acdirmin=3,acdirmax=20")
    world.spawn(a, create_marker, "/shared/new", 30.0)
    world.spawn(b, _poll_stat, "/shared", 90)
    world.run()
    # At 41 the GETATTR sees the creation: back to 3 s, then 6, 12, 20 again.
    assert _getattr_times(world, "b") == [3.0, 9.0, 21.0, 41.0, 44.0, 50.0, 62.0, 82.0]


def test_noac_revalidates_on_every_lookup():
    world, a, b = two_hosts("vers=3,noac")
    world.server.mkdir("/shared/t")
    world.spawn(a, create_marker, MARKER, 0.35)
    poller = world.spawn(b, poll_until_seen, MARKER)
    world.run()
    assert 0.35 <= poller.result() <= 0.35 + POLL


def test_open_with_o_creat_on_a_cached_negative_entry_opens_the_existing_file():
    # docs/nfs-facts.md, "Attribute and dentry caches": real NFS never turns a
    # stale negative entry into EEXIST for O_CREAT without O_EXCL; the CREATE
    # (UNCHECKED) returns the existing file.
    def late_open():
        assert not posix.exists("/shared/f")  # caches "not found" at t=0
        posix.sleep(1.0)
        fd = posix.open("/shared/f", os.O_CREAT | os.O_RDWR, 0o644)
        data = posix.read(fd, 100)
        posix.close(fd)
        return data

    def write_early():
        posix.sleep(0.5)
        fd = posix.open("/shared/f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        posix.write(fd, b"from a")
        posix.close(fd)

    world, a, b = two_hosts()
    world.spawn(a, write_early)
    reader = world.spawn(b, late_open)
    world.run()
    assert reader.result() == b"from a"


def test_o_excl_on_a_cached_negative_entry_is_eexist_from_the_server():
    def late_exclusive():
        assert not posix.exists("/shared/f")
        posix.sleep(1.0)
        posix.open("/shared/f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)

    world, a, b = two_hosts()
    world.spawn(a, create_marker, "/shared/f", 0.5)
    loser = world.spawn(b, late_exclusive)
    world.run(check=False)  # EEXIST is the expected outcome
    with pytest.raises(FileExistsError):
        loser.result()
    event = world.trace.select(host="b", op="open")[-1]
    assert event.outcome == "EEXIST" and "CREATE" in event.rpcs


def test_mkdir_eexist_drops_the_cached_negative_entry():
    # nfs_mkdir d_drop()s the dentry when MKDIR fails, so the isdir() that
    # os.makedirs(exist_ok=True) does next asks the server and succeeds.
    def late_makedirs():
        assert not os.path.isdir("/shared/out/cfg")  # caches "absent"
        posix.sleep(2.0)
        os.makedirs("/shared/out/cfg", exist_ok=True)
        return os.path.isdir("/shared/out/cfg")

    def other_host_creates():
        posix.sleep(1.0)
        posix.mkdir("/shared/out/cfg")

    world, a, b = two_hosts()
    world.server.mkdir("/shared/out")
    world.spawn(a, other_host_creates)
    process = world.spawn(b, late_makedirs)
    world.run()
    assert process.result() is True
    mkdirs = world.trace.select(host="b", op="mkdir")
    assert mkdirs[-1].outcome == "EEXIST" and "MKDIR" in mkdirs[-1].rpcs


def test_a_hosts_belief_names_the_negative_entry_and_when_acdirmin_ends_it():
    world, a, b = two_hosts()
    world.server.mkdir("/shared/t")
    world.spawn(a, create_marker, MARKER, 1.0)
    world.spawn(b, poll_until_seen, MARKER)
    world.run(until=29.95)
    stale = b.belief(MARKER)
    assert (stale.believes, stale.until) == ("absent", pytest.approx(30.0))
    assert "negative dentry for 'marker' in /shared/t" in stale.because
    assert "acdirmin=30" in stale.because
    # A's own caches expired long ago (or never verified): its next stat asks.
    assert a.belief(MARKER).believes == "unknown"
    assert "server says present" in world.explain(MARKER)
    world.run()
    assert b.belief(MARKER).believes == "present"


def test_lookupcache_positive_believes_nothing_it_cached_as_absent():
    world, a, b = two_hosts("vers=3,lookupcache=positive")
    world.server.mkdir("/shared/t")
    # Twice: the second lookup verifies the dentry of t (module docstring).
    world.spawn(b, lambda: [posix.exists(MARKER) for _ in range(2)])
    world.run()
    assert b.belief(MARKER).believes == "unknown"
    assert "never trusts a negative entry" in b.belief(MARKER).because


def test_an_access_reply_that_shows_a_change_is_not_cached_so_the_next_walk_asks_again():
    # nfs_do_access: the reply's attributes go through nfs_refresh_inode
    # first, whose nfs_update_inode sets NFS_INO_INVALID_ACCESS on a change;
    # the entry nfs_access_add_cache then adds is zapped at the next check
    # (nfs_access_get_cached_locked), which sends ACCESS again.  b mounted
    # before /shared/d was made, so its first ACCESS on /shared shows that.
    def looks():
        for _ in range(3):
            os.path.exists("/shared/d/x")
            posix.sleep(POLL)

    world, _, b = two_hosts()
    world.server.mkdir("/shared/d")
    world.spawn(b, looks)
    world.run()
    assert [event.rpcs for event in world.trace.select(host="b", op="stat")] == [
        ("ACCESS", "LOOKUP", "ACCESS", "LOOKUP"), ("ACCESS",), ()]
