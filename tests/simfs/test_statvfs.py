"""statvfs, fstatvfs and shutil.disk_usage on the export.

Each call is one FSSTAT (``nfs_statfs``, fs/nfs/super.c, keeps no cache),
and the client turns the reply into a statfs as that function does: the
block and fragment size are the superblock's, the wsize (1 MiB here, as
/proc/mounts says), byte counts rounded up to whole blocks, free files from
``afiles``.  The server exports a 1 TiB ext4 filesystem made with mke2fs's
defaults (mke2fs(8)): 4 KiB blocks, 2**26 inodes (one per 16 KiB), 5 % of
the blocks reserved for root, which is what separates free from available.
"""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from simfs import SimulationEscape, World

MIB = 1 << 20
TIB = 1 << 40
RESERVED = TIB * 5 // 100


def _run(program, mount: str = "vers=3"):
    world = World(seed=1)
    world.server.mkdir("/shared/d")
    process = world.spawn(world.host("a", mount=mount), program)
    world.run()
    return process.result(), world


def test_an_empty_export_is_a_fresh_1_tib_ext4_seen_through_a_1_mib_wsize():
    result, world = _run(lambda: os.statvfs("/shared"))
    # Two directories in use: the export's root and /shared/d, a block each.
    free = TIB - 2 * 4096
    assert result == os.statvfs_result((
        MIB, MIB, TIB // MIB, -(-free // MIB), -(-(free - RESERVED) // MIB),
        TIB // (16 << 10), TIB // (16 << 10) - 2, TIB // (16 << 10) - 2,
        os.ST_RELATIME, 255))
    assert result.f_fsid == 0
    (event,) = world.trace.select(op="statvfs")
    assert (event.path, event.outcome, event.rpcs) == ("/shared", "ok", ("FSSTAT",))


def test_what_files_take_is_counted_in_whole_4_kib_blocks_with_fast_symlinks_free():
    def program():
        before = os.statvfs("/shared")
        with open("/shared/d/weights", "wb") as file:
            file.write(b"w" * (3 * MIB + 1))  # 769 blocks of 4 KiB
        os.symlink("weights", "/shared/d/short")  # under 60 bytes: in the inode
        os.symlink("x" * 60, "/shared/d/long")  # one block
        after = os.statvfs("/shared/d")
        usage = shutil.disk_usage("/shared/d")
        return before, after, usage

    before, after, usage = _run(program)[0]
    used_bytes = (769 + 1 + 2) * 4096  # the new blocks, and the two directories'
    assert after.f_bfree == -(-(TIB - used_bytes) // MIB) < before.f_bfree
    assert after.f_ffree == before.f_ffree - 3
    assert usage == (TIB, (after.f_blocks - after.f_bfree) * MIB, after.f_bavail * MIB)


def test_fstatvfs_asks_through_the_descriptor_and_a_read_only_mount_says_so():
    def program():
        fd = os.open("/shared/d", os.O_RDONLY)
        try:
            return os.fstatvfs(fd), os.statvfs(fd)
        finally:
            os.close(fd)

    (by_fstatvfs, by_statvfs), world = _run(program, mount="vers=3,ro")
    assert by_fstatvfs == by_statvfs
    assert by_fstatvfs.f_flag == os.ST_RDONLY | os.ST_RELATIME
    assert [event.rpcs for event in world.trace.select(op="statvfs")] == [("FSSTAT",)] * 2


def test_a_missing_path_is_enoent_and_the_real_machines_disks_are_an_escape():
    def missing():
        try:
            os.statvfs("/shared/nowhere")
        except OSError as error:
            return error.errno, error.filename
        return "no error"

    assert _run(missing)[0] == (errno.ENOENT, "/shared/nowhere")
    with pytest.raises(SimulationEscape, match="the real machine's disks differ"):
        _run(lambda: shutil.disk_usage("/"))
