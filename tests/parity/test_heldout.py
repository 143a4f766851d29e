"""Held-out differences (issue 27), each measured in the VM first.

The cases are those of ``compose/probe_heldout.py``; its run on the VM's
Linux 6.1 NFSv3 client and knfsd is quoted in docs/nfs-facts.md ("Stale
handles", "Writes and data visibility").  Host b's attribute timeouts are 3 s
(conftest.MOUNTS); the other host acts at 0.5-1 s and b looks well before 3 s
or well after, away from the boundary that jitter under emulation blurs.
"""

from __future__ import annotations

from . import programs
from .test_parity import _setup

PAGE = 4096
DIR_CALLS = ("fstat", "listdir", "stat x", "open x", "open x", "open new", "open excl",
             "mkdir", "unlink x", "rmdir sub", "rename x")


def _dir_fd_calls(cluster, name, at):
    """b's calls through a directory descriptor after a removed the directory
    (and in two cases made it again), for each of uncached/cached x removed/recreated."""
    specs_a, specs_b = [], []
    for cached in (False, True):
        for recreate in (False, True):
            base = _setup(cluster, f"{name}-{int(cached)}{int(recreate)}")
            cluster.run(("pos", programs.write_file, (f"{base}/d/x", b"x")),
                        ("pos", programs.write_file, (f"{base}/d/sub/s", b"s")))
            # rmtree of d takes a second or more of RPCs under emulation.
            specs_a.append(("a", programs.remove_tree_and_maybe_recreate,
                            (f"{base}/d", 0.5, recreate)))
            specs_b.append(("b", programs.dir_fd_after_removal,
                            (f"{base}/d", at, cached, DIR_CALLS)))
    return cluster.run(*specs_a, *specs_b)[len(specs_a):]


def _stale(*ok):
    calls = ["fstat", "listdir", "stat x", "open x", "open x again", "open new", "open excl",
             "mkdir", "unlink x", "rmdir sub", "rename x"]
    return {call: "ok" if call in ok else "ESTALE" for call in calls}


def test_calls_through_a_directory_descriptor_are_estale_once_another_host_removed_it(cluster):
    # Measured (compose/probe_heldout.py, dirfd ... at 2.5): inside b's
    # attribute timeout fstat of the descriptor still answers from cache, and
    # so does stat of a name b looked up before; every call that asks the
    # server about the directory (READDIRPLUS, LOOKUP, CREATE, MKDIR, REMOVE,
    # RMDIR, RENAME) is ESTALE, even where a made the directory again: the
    # walk starts at the descriptor's file handle (fs/namei.c path_init
    # takes the dfd's path), not at its name.
    uncached_removed, uncached_recreated, cached_removed, cached_recreated = \
        _dir_fd_calls(cluster, "dirfd-early", 2.5)
    assert uncached_removed == uncached_recreated == _stale("fstat")
    assert cached_removed == cached_recreated == _stale("fstat", "stat x")


def test_after_the_attribute_timeout_even_fstat_of_the_directory_descriptor_is_estale(cluster):
    # Measured (dirfd ... at 5.0): every call, fstat included (its GETATTR).
    assert _dir_fd_calls(cluster, "dirfd-late", 5.0) == [_stale()] * 4


def test_a_host_s_own_write_keeps_its_page_from_before_another_host_s_change(cluster):
    # Measured (compose/probe_heldout.py, own-write): b reads page 0 through
    # an O_RDWR descriptor; a rewrites page 0 at 1 s; b writes one byte in
    # page 1 at 2 s and fsyncs.  Over NFSv3 the WRITE reply's pre-op
    # attributes carry no change attribute, so the client takes the cached
    # one as the pre-op value (nfs_post_op_update_inode_force_wcc, fs/nfs/
    # inode.c) and the reply's new attributes as its own change
    # (nfs_wcc_update_inode): b's stale page 0 stays trusted by that
    # descriptor, by a reopen at 2.5 s and by one at 7 s.
    base = _setup(cluster, "own-write")
    cluster.run(("pos", programs.write_file, (f"{base}/f", b"A" * PAGE + b"a" * PAGE)))
    _, seen = cluster.run(
        ("a", programs.rewrite_at, (f"{base}/f", 1.0, b"B" * PAGE)),
        ("b", programs.own_write_after_remote_change, (f"{base}/f", 2.0, 2.5, 7.0)))
    assert seen == [b"AAAA"] * 4
    # The server has a's page 0 and b's byte: a fresh host reads them.
    data = cluster.run(("grow", programs.read_file, (f"{base}/f",)))[0]
    assert data[:4] == b"BBBB" and data[5000:5001] == b"X"


def test_after_a_pread_got_estale_the_name_is_looked_up_again(cluster):
    # Measured (stale-removed, stale-recreated): b holds f open; a unlinks f
    # at 1 s (and in the second case makes a new f); b's pread at 4.5 s
    # (after acregmin) is ESTALE, and so is fstat after it; a lookup of the
    # name then asks the server: ENOENT, or the new file.  Over NFSv4.1 the
    # server keeps the file b holds open (its OPEN state), so b still reads.
    held = "ok" if cluster.kernel.server_holds_opens else "ESTALE"
    for name, recreate, expected in (
            ("stale-removed", b"", {"exists": False, "stat": "ENOENT",
                                    "exists again": False, "open": "ENOENT"}),
            ("stale-recreated", b"anew", {"exists": True, "stat": "ok", "exists again": True,
                                          "read": b"anew", "open": "ok"})):
        base = _setup(cluster, name)
        cluster.run(("pos", programs.write_file, (f"{base}/f", b"data")))
        _, seen = cluster.run(("a", programs.remove_at, (f"{base}/f", 1.0, recreate)),
                              ("b", programs.exists_after_stale_pread, (base, 4.5)))
        assert seen == {"pread": held, **expected, "fstat": held}


def test_a_change_seen_while_open_for_writing_drops_the_pages_at_the_next_open(cluster):
    # Measured (compose/probe_heldout.py --round-2, open-rw then reopen): b
    # holds f O_RDWR and reads it; a rewrites it at 1 s.  b's pread at 4.5 s
    # (after acregmin: a GETATTR shows the change) still returns b's old
    # page: with a writer on the inode nfs_update_inode only defers the
    # invalidation (NFS_INO_DATA_INVAL_DEFER).  b closes at 5 s; its next
    # open, the first open context again, makes it an invalidation
    # (nfs_inode_attach_open_context, fs/nfs/inode.c): new data at 5.5 s.
    base = _setup(cluster, "open-rw")
    cluster.run(("pos", programs.write_file, (f"{base}/f", b"old-data")))
    _, seen = cluster.run(
        ("a", programs.rewrite_at, (f"{base}/f", 1.0, b"new-data")),
        ("b", programs.pread_rw_then_reopen, (f"{base}/f", (0.0, 2.0, 4.5), 5.0, (5.5, 9.0))))
    assert seen == [b"old-data"] * 3 + [b"new-data"] * 2
