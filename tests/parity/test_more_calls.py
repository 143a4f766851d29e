"""The rest of os, on the simulation and on a real Linux client.

The simulation's answers here come from the sources it cites (chown(2),
fs/nfs/super.c ``nfs_statfs``, copy_file_range(2), glibc's lockf); the
real tier checks them against the VM's kernel and knfsd, whose export is
``no_root_squash`` and whose mounts are ``rw,relatime`` with the default
1 MiB wsize and 255-byte names.
"""

from __future__ import annotations

import os

from . import programs
from .test_parity import SLACK, _setup


def test_a_chown_by_root_clears_set_user_id_and_executable_set_group_id(cluster):
    base = _setup(cluster, "chown")
    (answers,) = cluster.run(("a", programs.chown_modes, (base,)))
    assert answers == [("0o755", 5, 6), ("0o2644", 5, 6)]


def test_statvfs_reports_the_mount_s_block_size_name_length_and_flags(cluster):
    base = _setup(cluster, "statvfs")
    (shape,) = cluster.run(("a", programs.statvfs_shape, (base,)))
    # nfs_statfs: f_bsize = f_frsize = the superblock's block size, the
    # wsize (1 MiB on a server with 4 GiB of memory or more, knfsd's
    # nfsd_get_default_max_blksize; 256 KiB measured in the VM), which is a
    # file's st_blksize too; f_namemax the server's name length; f_fsid 0.
    assert shape == {"bsize_is_wsize": True, "bsize_is_st_blksize": True, "namemax": 255,
                     "flag": os.ST_RELATIME, "fsid": 0, "ordered": True, "favail": True}


def test_vectored_io_is_one_read_or_write_of_the_buffers_joined(cluster):
    base = _setup(cluster, "vectored")
    (answers,) = cluster.run(("a", programs.vectored, (f"{base}/f",)))
    assert answers == [[4, 2], 4, b"aXY", b"d", 2, b"Yd"]  # abcd, then XY at 1


def test_copy_file_range_on_nfsv3_copies_through_the_page_cache(cluster):
    base = _setup(cluster, "copy")
    (answers,) = cluster.run(("a", programs.copy_range, (base,)))
    assert answers == [[4, 3], [4, 4], b"0123" + bytes(4) + b"789", "EBADF"]


def test_os_lockf_on_one_host_is_seen_by_f_test_and_f_tlock_on_the_other(cluster):
    # glibc's lockf: F_TEST asks F_GETLK (EACCES when another process holds
    # a lock), F_TLOCK is F_SETLK (EAGAIN on a conflict, fs/locks.c).
    base = _setup(cluster, "lockf")
    cluster.run(("a", programs.write_file, (f"{base}/f", b"x")))
    _, probed = cluster.run(("a", programs.lockf_hold, (f"{base}/f", 2.0)),
                            ("b", programs.lockf_probe, (f"{base}/f", 1.0, 2.0)))
    assert probed == ["EACCES", "EAGAIN", "ok", "ok"]


def test_fchdir_enters_the_open_directory(cluster):
    base = _setup(cluster, "fchdir")
    (answers,) = cluster.run(("a", programs.fchdir_into, (base,)))
    assert answers == [True, "x"]


def test_the_memory_devices_are_the_kernels(cluster):
    (answers,) = cluster.run(("a", programs.memory_devices, ()))
    assert answers == [10, b"", b"\0\0\0", 8, (True, "0o666", 1, 3), (True, "0o666", 1, 5),
                       (True, "0o666", 1, 8), (True, "0o666", 1, 9)]


def test_names_over_255_bytes_and_paths_of_4096_bytes_are_enametoolong(cluster):
    # nfs_lookup fails a name over the server's namelen (255) before any RPC,
    # a create's or rename target's too, once the walk reaches it (a missing
    # directory before it is ENOENT first); getname() refuses a path of
    # PATH_MAX (4096) bytes before any walk.
    base = _setup(cluster, "names")
    (answers,) = cluster.run(("a", programs.name_lengths, (base,)))
    assert answers == {
        "create 255": "ok", "create 256": "ENAMETOOLONG", "stat 256": "ENAMETOOLONG",
        "mkdir 256": "ENAMETOOLONG", "create 255 bytes of 2-byte chars": "ok",
        "create 256 bytes of 2-byte chars": "ENAMETOOLONG", "rename to 256": "ENAMETOOLONG",
        "256 under a missing directory": "ENOENT", "path of 4095 bytes": "ENOENT",
        "path of 4096 bytes": "ENAMETOOLONG"}


def test_awkward_renames_removals_and_trailing_slashes_fail_as_on_linux(cluster):
    # rename(2), rmdir(2) ("pathname has . as last component": EINVAL),
    # path_resolution(7) (a trailing slash demands a directory: ENOTDIR for
    # a file, EISDIR for a create), pwrite(2) BUGS (O_APPEND wins).
    base = _setup(cluster, "edges")
    (answers,) = cluster.run(("a", programs.edge_errnos, (base,)))
    assert answers == {
        "rename file over dir": "EISDIR", "rename dir over file": "ENOTDIR",
        "rename dir over non-empty dir": "ENOTEMPTY", "rename dir into itself": "EINVAL",
        "rename to itself": "ok", "rmdir a file": "ENOTDIR", "rmdir dot": "EINVAL",
        "stat file slash": "ENOTDIR", "open file slash": "ENOTDIR", "create slash": "EISDIR",
        "mkdir slash": "ok", "readlink a file": "EINVAL", "symlink over existing": "EEXIST",
        "link a directory": "EPERM", "unlink a directory": "EISDIR",
        "unlink file slash": "ENOTDIR", "rename file to slash": "ENOTDIR",
        "symlink to new slash": "ENOENT", "rename dir slash to slash": "ok",
        "rmdir slash": "ok", "stat dir dot": "ok", "rmdir dotdot then dot": "EINVAL",
        "unlink dotdot then slash": "ENOTDIR", "create dotdot then slash": "EISDIR",
        "create file dot": "ENOTDIR", "create missing dot": "ENOENT",
        "pwrite negative": "EINVAL", "symlink target of 1025": "ok",
        "symlink target of 4096": "ENAMETOOLONG",
        "listdir bytes": "[b'inner']", "pwrite with O_APPEND": "abcX"}


def test_st_blocks_counts_the_server_s_4_kib_blocks_and_not_the_holes(cluster):
    # NFSv3's fattr3 "used" (bytes the server's ext4 allocated; the client
    # reports used / 512): whole 4 KiB blocks of data written, none for a
    # hole left by a truncate or a seek, none for a fast symlink's target.
    base = _setup(cluster, "blocks")
    (counts,) = cluster.run(("a", programs.block_counts, (base,)))
    assert counts == {"empty": 0, "one": 8, "page": 8, "page1": 16, "sparse": 0,
                      "island": 8, "short": 0, "long": 8, "sub": 8}


def test_a_read_that_reaches_the_server_moves_atime_once_as_relatime_does(cluster):
    # knfsd's READ updates atime on its relatime mount (relatime_need_update:
    # only when atime is not newer than mtime); b's second read comes from
    # its page cache and sends no READ.  a sees it after its attributes
    # expire (acregmin=3).
    base = _setup(cluster, "atime")
    cluster.run(("a", programs.write_file, (f"{base}/f", b"x" * 10000)))
    _, seen = cluster.run(("b", programs.atime_reader, (f"{base}/f", 2.0, 2.0)),
                          ("a", programs.atime_seen, (f"{base}/f", 8.0)))
    assert 2.0 - 0.1 <= seen <= 2.0 + (0.1 if cluster.backend == "sim" else SLACK)
    (moved,) = cluster.run(("b", programs.directory_atime_moved, (base,)))
    assert moved
