"""Silly rename, and the errnos it puts in the way of removals.

docs/nfs-facts.md, "Silly rename", measured with Linux 6.1 and knfsd: a file
open on host A and unlinked on A leaves ``.nfs`` + 24 hex digits in its
directory; the open descriptor still reads the data; the entry disappears at
the close; ``rmdir`` of the directory fails with ENOTEMPTY meanwhile;
``os.replace`` over an open ``metadata.json`` leaves a ``.nfs`` entry beside
the new one.
"""

import errno
import os
import re

import pytest

from simfs import posix

from .helpers import run_alone, two_hosts

SILLY = re.compile(r"^\.nfs[0-9a-f]{24}$")


def _write(path, data):
    fd = posix.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    posix.write(fd, data)
    posix.close(fd)


def test_unlinking_a_file_open_on_the_same_host_leaves_nfs_and_24_hex_digits():
    def scenario():
        posix.mkdir("/shared/d")
        _write("/shared/d/f", b"weights")
        fd = posix.open("/shared/d/f", os.O_RDONLY)
        posix.unlink("/shared/d/f")
        during = posix.listdir("/shared/d")
        data = posix.read(fd, 100)
        posix.close(fd)
        return during, data, posix.listdir("/shared/d")

    world, a, _ = two_hosts()
    during, data, after = run_alone(world, a, scenario)
    assert len(during) == 1 and SILLY.match(during[0]), during
    assert data == b"weights"
    assert after == []


def test_the_silly_name_is_the_file_id_and_a_per_client_counter():
    def scenario():
        _write("/shared/f", b"x")
        inode = posix.stat("/shared/f").st_ino
        fd = posix.open("/shared/f", os.O_RDONLY)
        posix.unlink("/shared/f")
        name = posix.listdir("/shared")[0]
        posix.close(fd)
        return inode, name

    world, a, _ = two_hosts()
    inode, name = run_alone(world, a, scenario)
    # nfs_sillyrename: ".nfs%016llx%08x" % (fileid, ++sillycounter)
    assert name == f".nfs{inode:016x}{1:08x}"


def test_unlinking_a_busy_nfs_entry_is_ebusy():
    def scenario():
        _write("/shared/f", b"x")
        fd = posix.open("/shared/f", os.O_RDONLY)
        posix.unlink("/shared/f")
        silly = "/shared/" + posix.listdir("/shared")[0]
        try:
            posix.unlink(silly)
        except OSError as error:
            return error.errno
        finally:
            posix.close(fd)

    world, a, _ = two_hosts()
    assert run_alone(world, a, scenario) == errno.EBUSY


def test_rmdir_next_to_a_busy_nfs_entry_is_enotempty():
    def scenario():
        posix.mkdir("/shared/d")
        _write("/shared/d/f", b"x")
        fd = posix.open("/shared/d/f", os.O_RDONLY)
        posix.unlink("/shared/d/f")
        try:
            posix.rmdir("/shared/d")
        except OSError as error:
            code = error.errno
        posix.close(fd)
        posix.rmdir("/shared/d")  # succeeds once the last close removed it
        return code

    world, a, _ = two_hosts()
    assert run_alone(world, a, scenario) == errno.ENOTEMPTY
    assert not world.server.exists("/shared/d")


def test_unlinking_a_nfs_entry_that_vanished_after_the_listing_is_enoent():
    def scenario():
        _write("/shared/f", b"x")
        fd = posix.open("/shared/f", os.O_RDONLY)
        posix.unlink("/shared/f")
        listed = posix.listdir("/shared")
        posix.close(fd)  # the last close removes the .nfs file
        try:
            posix.unlink("/shared/" + listed[0])
        except OSError as error:
            return error.errno

    world, a, _ = two_hosts()
    assert run_alone(world, a, scenario) == errno.ENOENT


def test_replace_over_a_file_open_on_the_same_host_leaves_a_nfs_entry_beside_it():
    def scenario():
        _write("/shared/metadata.json", b'{"v": 1}')
        reader = posix.open("/shared/metadata.json", os.O_RDONLY)
        _write("/shared/tmp", b'{"v": 2}')
        posix.replace("/shared/tmp", "/shared/metadata.json")
        names = sorted(posix.listdir("/shared"))
        old = posix.read(reader, 100)
        posix.close(reader)
        return names, old, sorted(posix.listdir("/shared"))

    world, a, _ = two_hosts()
    names, old, after = run_alone(world, a, scenario)
    assert names[1] == "metadata.json" and SILLY.match(names[0]) and len(names) == 2
    assert old == b'{"v": 1}'
    assert after == ["metadata.json"]
    assert world.server.read_bytes("/shared/metadata.json") == b'{"v": 2}'


def test_unlink_from_another_host_removes_at_once_and_the_holder_gets_estale():
    def holder():
        fd = posix.open("/shared/f", os.O_RDONLY)
        posix.sleep(2.0)
        try:
            posix.read(fd, 10)
        except OSError as error:
            return error.errno
        finally:
            posix.close(fd)

    def remover():
        posix.sleep(1.0)
        posix.unlink("/shared/f")
        return posix.listdir("/shared")

    world, a, b = two_hosts()
    world.server.write_bytes("/shared/f", b"data")
    held = world.spawn(a, holder)
    removed = world.spawn(b, remover)
    world.run()
    # Silly rename is client-side: only the host holding the file open does it.
    assert removed.result() == []
    assert held.result() == errno.ESTALE


def test_replace_from_another_host_makes_the_old_descriptor_stale():
    def holder():
        fd = posix.open("/shared/metadata.json", os.O_RDONLY)
        posix.sleep(2.0)
        with pytest.raises(OSError) as caught:
            posix.fstat(fd)
        posix.close(fd)
        return caught.value.errno

    def writer():
        posix.sleep(1.0)
        _write("/shared/tmp", b"new")
        posix.replace("/shared/tmp", "/shared/metadata.json")

    world, a, b = two_hosts("vers=3,acregmin=1,acregmax=1")
    world.server.write_bytes("/shared/metadata.json", b"old")
    held = world.spawn(b, holder)  # b's attributes expire after 1 s: fstat asks
    world.spawn(a, writer)
    world.run()
    assert held.result() == errno.ESTALE


def test_unlinking_one_of_two_hard_links_shows_one_link_left_on_the_same_host():
    # nfs_safe_remove -> nfs_drop_nlink (fs/nfs/dir.c) drops the inode's link
    # count and marks its attributes invalid, so a stat of the other name on
    # the host that unlinked answers fresh (Linux; found by filelock's suite,
    # which checks st_nlink after removing a link).
    def scenario():
        _write("/shared/a", b"x")
        os.link("/shared/a", "/shared/b")
        before = os.stat("/shared/a").st_nlink
        os.unlink("/shared/b")
        return before, os.stat("/shared/a").st_nlink

    world, a, _ = two_hosts()
    assert run_alone(world, a, scenario) == (2, 1)


# Silly rename is per name, not per inode: nfs_unlink (fs/nfs/dir.c) renames
# a name whose dentry is in use (d_count(dentry) > 1), and an open file holds
# only the dentry it was opened through (d_move carries it along a rename).
# The parity test of the same name checks the first fact on a real client.


def test_unlinking_another_name_of_an_open_file_removes_it_without_a_nfs_entry():
    def scenario():
        posix.mkdir("/shared/d")
        _write("/shared/d/f", b"weights")
        posix.link("/shared/d/f", "/shared/d/g")
        fd = posix.open("/shared/d/f", os.O_RDONLY)
        posix.unlink("/shared/d/g")
        other = sorted(posix.listdir("/shared/d"))
        posix.unlink("/shared/d/f")
        own = posix.listdir("/shared/d")
        data = posix.read(fd, 100)
        posix.close(fd)
        return other, own, data, posix.listdir("/shared/d")

    world, a, _ = two_hosts()
    other, own, data, after = run_alone(world, a, scenario)
    assert other == ["f"]
    assert len(own) == 1 and SILLY.match(own[0])
    assert data == b"weights" and after == []


def test_a_file_renamed_while_open_is_silly_renamed_under_its_new_name():
    def scenario():
        posix.mkdir("/shared/d")
        _write("/shared/d/part", b"blob")
        fd = posix.open("/shared/d/part", os.O_RDONLY)
        posix.rename("/shared/d/part", "/shared/d/blob")
        posix.unlink("/shared/d/blob")
        during = posix.listdir("/shared/d")
        posix.close(fd)
        return during, posix.listdir("/shared/d")

    world, a, _ = two_hosts()
    during, after = run_alone(world, a, scenario)
    assert len(during) == 1 and SILLY.match(during[0])
    assert after == []


def test_a_nfs_entry_goes_at_the_last_close_of_its_name_while_another_name_stays_open():
    def scenario():
        posix.mkdir("/shared/d")
        _write("/shared/d/f", b"weights")
        posix.link("/shared/d/f", "/shared/d/g")
        through_f = posix.open("/shared/d/f", os.O_RDONLY)
        through_g = posix.open("/shared/d/g", os.O_RDONLY)
        posix.unlink("/shared/d/f")
        posix.close(through_f)
        after_f_closed = sorted(posix.listdir("/shared/d"))
        data = posix.read(through_g, 100)
        posix.close(through_g)
        return after_f_closed, data

    world, a, _ = two_hosts()
    after_f_closed, data = run_alone(world, a, scenario)
    assert after_f_closed == ["g"]
    assert data == b"weights"
