"""Stale file handles: what another host's removal does to open files and cwds.

Facts from docs/nfs-facts.md, "Stale handles" (Linux 6.1, knfsd, default
options), with the kernel rules that produce them: ``nfs_sillyrename`` marks
the renamed inode's attributes invalid (fs/nfs/unlink.c), an ESTALE reply marks
the inode stale so every later use fails without an RPC
(``nfs_set_inode_stale``, ``__nfs_revalidate_inode``), and ``nfs_lookup``
stamps a new dentry with the directory's verifier from *before* the LOOKUP,
so a reply that shows the directory changed leaves it unverified
(``nfs_set_verifier``, fs/nfs/dir.c).
"""

from __future__ import annotations

import errno
import os
import shutil

from simfs import World, posix


def _outcome(call, *args):
    try:
        result = call(*args)
    except OSError as error:
        return errno.errorcode[error.errno]
    return "ok" if result is None else result


def test_the_holder_of_a_silly_renamed_file_gets_estale_once_another_host_removed_it():
    # docs/nfs-facts.md, "Stale handles": A opens and unlinks a file; B lists
    # the directory, sees the .nfs entry, rmdir fails ENOTEMPTY, rmtree
    # succeeds; then on A fstat and an unbuffered read are ESTALE and close is
    # fine.
    def holder() -> tuple[str, str, str]:
        fd = os.open("/shared/d/f", os.O_RDONLY)
        os.unlink("/shared/d/f")
        posix.sleep(2.0)
        return _outcome(lambda: os.fstat(fd) and None), _outcome(os.read, fd, 10), \
            _outcome(os.close, fd)

    def remover() -> tuple[list[str], str, str]:
        posix.sleep(1.0)
        listed = os.listdir("/shared/d")
        return listed, _outcome(os.rmdir, "/shared/d"), _outcome(shutil.rmtree, "/shared/d")

    world = World()
    world.server.mkdir("/shared/d")
    world.server.write_bytes("/shared/d/f", b"held")
    a, b = world.host("a"), world.host("b")
    held = world.spawn(a, holder)
    removed = world.spawn(b, remover)
    world.run()
    listed, rmdir, rmtree = removed.result()
    assert len(listed) == 1 and listed[0].startswith(".nfs")
    assert (rmdir, rmtree) == ("ENOTEMPTY", "ok")
    assert held.result() == ("ESTALE", "ESTALE", "ok")


def test_a_silly_renamed_file_still_on_the_server_is_read_after_a_getattr():
    # The invalidation only sends a GETATTR: while the .nfs file exists the
    # holder reads its data (docs/nfs-facts.md, "Silly rename").
    def holder() -> bytes:
        fd = os.open("/shared/f", os.O_RDONLY)
        os.unlink("/shared/f")
        data = os.read(fd, 10)
        os.close(fd)
        return data

    world = World()
    world.server.write_bytes("/shared/f", b"held")
    process = world.spawn(world.host("a"), holder)
    world.run()
    assert process.result() == b"held"
    assert "GETATTR" in world.trace.select(op="read")[0].rpcs


def _remove_tree_at(at: float, recreate: bool = False) -> None:
    posix.sleep(at)
    shutil.rmtree("/shared/d")
    if recreate:
        os.mkdir("/shared/d")
        with open("/shared/d/new", "w") as handle:
            handle.write("new")


def test_a_cwd_removed_by_another_host_is_estale_not_enoent():
    # docs/nfs-facts.md, "Stale handles": B's cwd is d; A removes d with its
    # files.  listdir("."), open("f", "w"), stat("."), chdir("..") are ESTALE;
    # getcwd() still returns the old path; exists("f") is False.
    def inside() -> dict[str, object]:
        os.chdir("/shared/d")
        posix.sleep(2.0)
        return {"listdir": _outcome(os.listdir, "."),
                "open": _outcome(lambda: open("f", "w").close()),
                "stat": _outcome(lambda: os.stat(".") and None),
                "getcwd": os.getcwd(),
                "exists": os.path.exists("f"),
                "chdir": _outcome(os.chdir, "..")}

    world = World()
    world.server.mkdir("/shared/d")
    world.server.write_bytes("/shared/d/f", b"x")
    a, b = world.host("a"), world.host("b")
    world.spawn(a, _remove_tree_at, 1.0)
    process = world.spawn(b, inside)
    world.run()
    assert process.result() == {"listdir": "ESTALE", "open": "ESTALE", "stat": "ESTALE",
                                "getcwd": "/shared/d", "exists": False, "chdir": "ESTALE"}


def test_a_recreated_cwd_stays_stale_until_the_process_chdirs_to_its_path_again():
    # docs/nfs-facts.md, "Stale handles": if A recreates d before B acts, B's
    # stat(".") may answer from cache, listdir(".") and open are ESTALE, and a
    # chdir to the path shows the new directory.
    def inside() -> tuple[object, ...]:
        os.chdir("/shared/d")
        posix.sleep(2.0)
        stat = _outcome(lambda: os.stat(".") and None)
        listing = _outcome(os.listdir, ".")
        opened = _outcome(lambda: open("g", "w").close())
        os.chdir("/shared/d")
        return stat, listing, opened, os.listdir(".")

    world = World()
    world.server.mkdir("/shared/d")
    a, b = world.host("a"), world.host("b")
    world.spawn(a, _remove_tree_at, 1.0, True)
    process = world.spawn(b, inside)
    world.run()
    assert process.result() == ("ok", "ESTALE", "ESTALE", ["new"])


def test_calls_through_a_directory_descriptor_walk_from_its_handle_not_its_name():
    # docs/nfs-facts.md, "Stale handles" (measured, compose/probe_heldout.py):
    # B opens d O_DIRECTORY; A removes d and makes it again with a file x.
    # Through B's descriptor every call that asks the server is ESTALE (the
    # *at calls start at the descriptor's handle: fs/namei.c path_init),
    # while the same names by path reach the new directory.
    def through_descriptor() -> dict[str, object]:
        fd = os.open("/shared/d", os.O_RDONLY | os.O_DIRECTORY)
        posix.sleep(2.0)
        answers = {
            "stat x": _outcome(lambda: os.stat("x", dir_fd=fd) and None),
            "open x": _outcome(lambda: os.close(os.open("x", os.O_RDONLY, dir_fd=fd))),
            "create": _outcome(lambda: os.close(os.open("n", os.O_WRONLY | os.O_CREAT, 0o644,
                                                       dir_fd=fd))),
            "mkdir": _outcome(lambda: os.mkdir("z", dir_fd=fd)),
            "unlink x": _outcome(lambda: os.unlink("x", dir_fd=fd)),
            "listdir": _outcome(os.listdir, fd),
            "by path": os.listdir("/shared/d"),
        }
        os.close(fd)
        return answers

    world = World()
    world.server.mkdir("/shared/d")
    world.server.write_bytes("/shared/d/x", b"x")
    a, b = world.host("a"), world.host("b")
    world.spawn(a, _remove_tree_at, 1.0, True)
    process = world.spawn(b, through_descriptor)
    world.run()
    assert process.result() == {"stat x": "ESTALE", "open x": "ESTALE", "create": "ESTALE",
                                "mkdir": "ESTALE", "unlink x": "ESTALE", "listdir": "ESTALE",
                                "by path": ["new"]}


def _exists_at(path: str, *times: float) -> list[bool]:
    seen = []
    for at in times:
        posix.sleep(at - posix.monotonic())
        seen.append(os.path.exists(path))
    return seen


def _walked_shared_then_exists_at(path: str, *times: float) -> list[bool]:
    """``_exists_at`` by a host that walked through /shared at 0.5 s (access cached)."""
    _exists_at("/shared/z", 0.5)
    return _exists_at(path, *times)


def _mkdir_at(path: str, at: float) -> None:
    posix.sleep(at - posix.monotonic())
    os.mkdir(path)


def test_a_negative_entry_in_a_directory_another_host_just_made_is_not_trusted():
    # docs/nfs-facts.md, "Attribute and dentry caches": A makes d at S-0.05;
    # B's first access is exists("d/x") at S (False); A makes d/x at S+0.05;
    # B's exists("d/x") at S+0.1 is True. As measured, B had walked through
    # /shared before (its earlier trials): its access to /shared is cached, so
    # its walk sends no ACCESS there, and B's LOOKUP of d is the first reply to
    # show /shared changed: d's dentry does not verify; the next walk LOOKUPs d
    # again, sees d changed and distrusts its entries.
    world = World()
    a, b = world.host("a"), world.host("b")
    world.spawn(a, _mkdir_at, "/shared/d", 0.95)
    world.spawn(a, _mkdir_at, "/shared/d/x", 1.05)
    process = world.spawn(b, _walked_shared_then_exists_at, "/shared/d/x", 1.0, 1.1)
    world.run()
    assert process.result() == [False, True]


def test_a_host_that_never_walked_the_parent_trusts_the_negative_entry_for_acdirmin():
    # docs/nfs-facts.md, "A directory made before or after the mount"
    # (measured): without B's access to /shared cached, B's walk first sends
    # ACCESS for /shared, whose post-op attributes show d's creation
    # (nfs3_proc_access -> nfs_refresh_inode); the LOOKUP of d then verifies,
    # and the negative entry for d/x hides x until acdirmin (30 s) after it.
    world = World()
    a, b = world.host("a"), world.host("b")
    world.spawn(a, _mkdir_at, "/shared/d", 0.95)
    world.spawn(a, _mkdir_at, "/shared/d/x", 1.05)
    process = world.spawn(b, _exists_at, "/shared/d/x", 1.0, 1.1, 30.9, 31.1)
    world.run()
    assert process.result() == [False, False, False, True]


def test_a_negative_entry_confirmed_by_a_second_lookup_is_trusted_for_acdirmin():
    # docs/nfs-facts.md, "Attribute and dentry caches": a negative entry B
    # makes later in d and confirms with a second lookup is trusted for
    # acdirmin (30 s) as usual.
    world = World()
    a, b = world.host("a"), world.host("b")
    world.spawn(a, _mkdir_at, "/shared/d", 0.95)
    world.spawn(a, _mkdir_at, "/shared/d/y", 3.0)
    process = world.spawn(b, _walked_shared_then_exists_at, "/shared/d/y", 1.0, 1.1, 5.0,
                          30.0, 31.2)
    world.run()
    assert process.result() == [False, False, False, False, True]


def test_the_rule_is_the_reply_showing_a_change_not_the_directorys_age():
    # The same timings, but B's cache of /shared is current when it first
    # looks d up (it listed /shared after d was made): the LOOKUP reply shows
    # no change, the dentries verify, and the negative entry is trusted.
    def look_after_listing() -> list[bool]:
        posix.sleep(0.97)
        os.listdir("/shared")
        return _exists_at("/shared/d/x", 1.0, 1.1)

    world = World()
    a, b = world.host("a"), world.host("b")
    world.spawn(a, _mkdir_at, "/shared/d", 0.95)
    world.spawn(a, _mkdir_at, "/shared/d/x", 1.05)
    process = world.spawn(b, look_after_listing)
    world.run()
    assert process.result() == [False, False]
