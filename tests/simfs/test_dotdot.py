"""A ``..`` the program writes in a path climbs the directory the walk entered.

Linux resolves ``..`` from where the walk stands (fs/namei.c
``follow_dotdot``): after a symbolic link, ``link/..`` is the parent of the
link's target, and every name before a ``..`` must exist and be a
directory.  A path ending in ``..`` names no entry to create or remove
(``last_type`` LAST_DOTDOT): ``rmdir`` refuses it with ENOTEMPTY
(``do_rmdir``).  Folding the path lexically, as ``os.path.normpath`` does,
gives other answers for all four; the walk must not.

Every program below is plain ``os`` code.
"""

import errno
import os

from .helpers import errno_of, run_alone, two_hosts


def _layout(world):
    """/shared/a/b (directory), /shared/link -> a/b, and an x in /shared and /shared/a."""
    world.server.mkdir("/shared/a")
    world.server.mkdir("/shared/a/b")
    world.server.mkdir("/shared/empty")
    world.server.write_bytes("/shared/x", b"at the export root")
    world.server.write_bytes("/shared/a/x", b"in a")


def _read(path):
    with open(path, "rb") as handle:
        return handle.read()


def test_dotdot_after_a_symbolic_link_climbs_from_the_links_target():
    world, a, _ = two_hosts()
    _layout(world)

    def program():
        os.symlink("a/b", "/shared/link")
        return _read("/shared/link/../x"), sorted(os.listdir("/shared/link/.."))

    assert run_alone(world, a, program) == (b"in a", ["b", "x"])


def test_a_relative_dotdot_after_a_symbolic_link_climbs_from_the_links_target():
    world, a, _ = two_hosts()
    _layout(world)

    def program():
        os.symlink("/shared/a/b", "/shared/link")
        os.chdir("/shared")
        return _read("link/../x")

    assert run_alone(world, a, program) == b"in a"


def test_a_missing_name_before_dotdot_is_enoent_and_a_file_before_it_enotdir():
    world, a, _ = two_hosts()
    _layout(world)

    def program():
        return (errno_of(os.stat, "/shared/missing/../x"),
                errno_of(os.stat, "/shared/x/../x"))

    assert run_alone(world, a, program) == (errno.ENOENT, errno.ENOTDIR)


def test_rmdir_of_a_path_ending_in_dotdot_is_enotempty_not_a_removal_of_the_parent():
    world, a, _ = two_hosts()
    _layout(world)

    def program():
        return errno_of(os.rmdir, "/shared/empty/.."), os.path.isdir("/shared/empty")

    assert run_alone(world, a, program) == (errno.ENOTEMPTY, True)


def test_a_dotdot_without_links_reads_what_the_folded_path_names():
    world, a, _ = two_hosts()
    _layout(world)

    def program():
        os.chdir("/shared/a/b")
        return _read("/shared/a/b/../x"), _read("../../x"), _read("../x")

    assert run_alone(world, a, program) == (b"in a", b"at the export root", b"in a")
