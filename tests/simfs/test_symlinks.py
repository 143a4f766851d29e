"""Symbolic links on the simulated NFSv3 export.

Facts pinned here: a link is an object of its own on the server (SYMLINK
creates it with its target text, READLINK returns that text, RFC 1813
3.3.10 and 3.3.5); the VFS follows links in the middle of a path and at its
end except for lstat/readlink/unlink/rename/O_NOFOLLOW, relative targets
resolve against the link's directory, and more than 40 links in one
resolution is ELOOP (fs/namei.c, include/linux/namei.h MAXSYMLINKS).  The
Linux client keeps a link's target in its page cache and revalidates it by
attributes only (fs/nfs/symlink.c ``nfs_get_link``), so a host reads a
link's target once.  A link's name obeys the dentry rules of any name: a
negative entry hides a link made on another host until acdirmin, as it
hides a file (docs/nfs-facts.md, "Attribute and dentry caches").

Every program below is plain ``os``/``pathlib``/``shutil`` code.
"""

import errno
import os
import pathlib
import shutil
import stat
import time

import pytest

from simfs import SimulationEscape

from .helpers import POLL, errno_of, run_alone, two_hosts


def _write(path, data):
    with open(path, "w") as handle:
        handle.write(data)


def _read(path):
    with open(path) as handle:
        return handle.read()


def test_a_link_made_on_another_host_stays_hidden_by_a_negative_entry_until_acdirmin():
    world, a, b = two_hosts()
    world.server.mkdir("/shared/t")
    world.server.write_bytes("/shared/t/data", b"x")

    def make_link():
        time.sleep(0.2)
        os.symlink("data", "/shared/t/link")

    def poll():
        while not os.path.lexists("/shared/t/link"):
            time.sleep(POLL)
        return time.monotonic()

    world.spawn(a, make_link)
    poller = world.spawn(b, poll)
    world.run()
    # As for a file (tests/simfs/test_lookup_cache.py): B's lookup at 0
    # cached "not found" under a parent whose attributes expire 30 s later.
    assert poller.result() == pytest.approx(30.0)


def test_another_host_reads_lstats_stats_and_opens_through_a_link():
    world, a, b = two_hosts()

    def make():
        os.mkdir("/shared/d")
        _write("/shared/d/file", "payload")
        os.symlink("file", "/shared/d/link")

    def inspect():
        link = os.lstat("/shared/d/link")
        target = os.stat("/shared/d/link")
        return (os.readlink("/shared/d/link"), stat.S_ISLNK(link.st_mode), link.st_size,
                target.st_ino == os.stat("/shared/d/file").st_ino, stat.S_ISREG(target.st_mode),
                _read("/shared/d/link"), os.path.islink("/shared/d/link"),
                os.path.islink("/shared/d/file"))

    run_alone(world, a, make)
    assert run_alone(world, b, inspect) == ("file", True, len("file"), True, True, "payload", True,
                                       False)


def test_a_relative_target_resolves_against_the_links_directory_not_the_cwd():
    world, a, _ = two_hosts()

    def program():
        os.makedirs("/shared/data")
        os.makedirs("/shared/sub/deeper")
        _write("/shared/data/f", "right")
        _write("/shared/sub/data", "wrong: relative to the cwd's sibling")
        os.symlink("../../data/f", "/shared/sub/deeper/link")
        os.chdir("/shared/sub")
        return _read("deeper/link"), os.path.realpath("/shared/sub/deeper/link")

    assert run_alone(world, a, program) == ("right", "/shared/data/f")


def test_links_in_the_middle_of_a_path_are_followed_absolute_ones_from_the_export():
    world, a, b = two_hosts()

    def make():
        os.makedirs("/shared/real/inner")
        _write("/shared/real/inner/f", "deep")
        os.symlink("/shared/real", "/shared/abs")
        os.symlink("real/inner", "/shared/rel")

    def read():
        return (_read("/shared/abs/inner/f"), _read("/shared/rel/f"),
                sorted(os.listdir("/shared/abs")), str(pathlib.Path("/shared/abs/inner").resolve()))

    run_alone(world, a, make)
    assert run_alone(world, b, read) == ("deep", "deep", ["inner"], "/shared/real/inner")


def test_a_dangling_link_exists_for_lexists_only_and_opening_it_is_enoent():
    world, a, _ = two_hosts()

    def program():
        os.symlink("missing", "/shared/dangling")
        return (os.path.exists("/shared/dangling"), os.path.lexists("/shared/dangling"),
                errno_of(_read, "/shared/dangling"), "dangling" in os.listdir("/shared"))

    assert run_alone(world, a, program) == (False, True, errno.ENOENT, True)


def test_open_with_o_creat_through_a_dangling_link_creates_its_target():
    # open(2): O_CREAT follows a final link and creates the file it names.
    world, a, _ = two_hosts()

    def program():
        os.symlink("made", "/shared/link")
        _write("/shared/link", "via link")
        return _read("/shared/made"), os.path.islink("/shared/link")

    assert run_alone(world, a, program) == ("via link", True)


def test_o_nofollow_on_a_link_and_o_excl_on_a_link_fail_as_on_linux():
    world, a, _ = two_hosts()

    def program():
        _write("/shared/f", "x")
        os.symlink("f", "/shared/link")
        return (errno_of(os.open, "/shared/link", os.O_RDONLY | os.O_NOFOLLOW),
                errno_of(os.open, "/shared/link", os.O_WRONLY | os.O_CREAT | os.O_EXCL))

    assert run_alone(world, a, program) == (errno.ELOOP, errno.EEXIST)


def test_a_cycle_is_eloop_and_forty_links_resolve_but_forty_one_do_not():
    world, a, _ = two_hosts()

    def program():
        os.symlink("b", "/shared/a")
        os.symlink("a", "/shared/b")
        _write("/shared/l0", "end")
        for index in range(1, 42):
            os.symlink(f"l{index - 1}", f"/shared/l{index}")
        return (errno_of(os.stat, "/shared/a"), _read("/shared/l40"),
                errno_of(os.stat, "/shared/l41"))

    assert run_alone(world, a, program) == (errno.ELOOP, "end", errno.ELOOP)


def test_making_a_link_over_an_existing_name_is_eexist():
    world, a, _ = two_hosts()

    def program():
        _write("/shared/f", "x")
        return errno_of(os.symlink, "anything", "/shared/f"), _read("/shared/f")

    assert run_alone(world, a, program) == (errno.EEXIST, "x")


def test_an_absolute_target_outside_the_export_is_a_loud_escape_naming_it():
    world, a, _ = two_hosts()

    def program():
        os.symlink("/etc/passwd", "/shared/out")
        return _read("/shared/out")

    world.spawn(a, program)
    with pytest.raises(SimulationEscape, match="'/etc/passwd'"):
        world.run()


def test_a_relative_target_climbing_above_the_export_is_a_loud_escape():
    world, a, _ = two_hosts()

    def program():
        os.symlink("../../etc/passwd", "/shared/up")
        return _read("/shared/up")

    world.spawn(a, program)
    with pytest.raises(SimulationEscape, match="climbs above the export"):
        world.run()


def test_unlink_removes_the_link_and_rename_moves_it_leaving_the_target():
    world, a, _ = two_hosts()

    def program():
        _write("/shared/f", "kept")
        os.symlink("f", "/shared/link")
        os.rename("/shared/link", "/shared/moved")
        moved = os.readlink("/shared/moved")
        os.unlink("/shared/moved")
        return moved, sorted(os.listdir("/shared")), _read("/shared/f")

    assert run_alone(world, a, program) == ("f", ["f"], "kept")


def test_rmtree_removes_a_link_to_a_directory_without_entering_it():
    world, a, b = two_hosts()

    def make():
        os.makedirs("/shared/keep")
        _write("/shared/keep/precious", "x")
        os.makedirs("/shared/tree")
        os.symlink("../keep", "/shared/tree/link")

    def remove():
        entry = next(iter(os.scandir("/shared/tree")))
        seen = (entry.name, entry.is_symlink(), entry.is_dir(),
                entry.is_dir(follow_symlinks=False))
        shutil.rmtree("/shared/tree")
        return seen, os.listdir("/shared/keep"), os.path.exists("/shared/tree")

    run_alone(world, a, make)
    assert run_alone(world, b, remove) == (("link", True, True, False), ["precious"], False)


def test_a_huggingface_style_snapshot_is_read_on_another_host_with_one_readlink():
    # huggingface_hub's cache: snapshots/<rev>/<file> -> ../../blobs/<hash>.
    world, a, b = two_hosts()
    repo = "/shared/hub/models--org--name"

    def download():
        os.makedirs(f"{repo}/blobs")
        os.makedirs(f"{repo}/snapshots/rev1")
        _write(f"{repo}/blobs/0123abcd", '{"hidden": 64}')
        pathlib.Path(f"{repo}/snapshots/rev1/config.json").symlink_to("../../blobs/0123abcd")

    def load():
        first = _read(f"{repo}/snapshots/rev1/config.json")
        second = _read(f"{repo}/snapshots/rev1/config.json")
        return first, second, str(pathlib.Path(f"{repo}/snapshots/rev1/config.json").readlink())

    run_alone(world, a, download)
    assert run_alone(world, b, load) == ('{"hidden": 64}', '{"hidden": 64}', "../../blobs/0123abcd")
    opens = [event for event in world.trace.select(host="b") if event.op == "open"]
    # The first open reads the target (READLINK); the second finds it cached.
    assert [event.rpcs.count("READLINK") for event in opens] == [1, 0]
    made = [event for event in world.trace.select(host="a") if event.op == "symlink"]
    assert [event.rpcs.count("SYMLINK") for event in made] == [1]


def test_chdir_through_a_link_makes_getcwd_the_real_directory():
    # getcwd(2) reports the directory's own path (d_path), not the link's.
    world, a, _ = two_hosts()

    def program():
        os.makedirs("/shared/real/dir")
        os.symlink("real/dir", "/shared/short")
        os.chdir("/shared/short")
        _write("here", "x")
        return os.getcwd(), os.listdir("/shared/real/dir")

    assert run_alone(world, a, program) == ("/shared/real/dir", ["here"])


def test_a_replaced_link_is_followed_to_its_old_target_until_the_dentry_expires():
    # The name's dentry is trusted for acdirmin like any other, and opening
    # through a link sends no close-to-open GETATTR for the link itself
    # (nfs_lookup_verify_inode revalidates files and directories only), so
    # host B keeps following the link it knows; once the parent's attributes
    # expire it looks the name up again and reads the new link's target.
    world, a, b = two_hosts()

    def make():
        _write("/shared/one", "one")
        _write("/shared/two", "two")
        os.symlink("one", "/shared/current")

    def replace():
        time.sleep(1)
        os.unlink("/shared/current")
        os.symlink("two", "/shared/current")

    def reader():
        # Two reads at 0: the first caches the link (b's first walk sends
        # ACCESS for the root, whose attributes already show A's link, so its
        # dentry verifies: tests/simfs/test_lookup_cache.py); the second
        # answers from the caches.
        seen = [_read("/shared/current"), _read("/shared/current")]
        time.sleep(2)
        seen.append(_read("/shared/current"))
        time.sleep(40)
        seen.append(_read("/shared/current"))
        return seen

    run_alone(world, a, make)
    world.spawn(a, replace)
    process = world.spawn(b, reader)
    world.run()
    assert process.result() == ["one", "one", "one", "two"]


def test_shutil_copies_a_link_as_a_link_or_as_its_targets_data_as_asked():
    # copytree(symlinks=True) recreates the link (readlink + symlink, then
    # copystat with follow_symlinks=False); copy2 follows it.
    world, a, _ = two_hosts()

    def program():
        os.makedirs("/shared/src/sub")
        _write("/shared/src/sub/f", "data")
        os.symlink("sub/f", "/shared/src/link")
        shutil.copytree("/shared/src", "/shared/kept", symlinks=True)
        shutil.copy2("/shared/src/link", "/shared/flat")
        return (os.readlink("/shared/kept/link"), _read("/shared/kept/link"),
                os.path.islink("/shared/flat"), _read("/shared/flat"))

    assert run_alone(world, a, program) == ("sub/f", "data", False, "data")


def test_chmod_of_a_link_itself_is_not_implemented_as_on_linux():
    # fchmodat(AT_SYMLINK_NOFOLLOW) on a link is EOPNOTSUPP; os.chmod says so
    # with NotImplementedError.
    world, a, _ = two_hosts()

    def program():
        _write("/shared/f", "x")
        os.symlink("f", "/shared/link")
        try:
            os.chmod("/shared/link", 0o600, follow_symlinks=False)
        except NotImplementedError as error:
            refused = str(error)
        os.chmod("/shared/link", 0o600)
        return refused, stat.S_IMODE(os.stat("/shared/f").st_mode)

    assert run_alone(world, a, program) == ("chmod: follow_symlinks unavailable on this platform",
                                       0o600)


def test_the_server_view_makes_and_shows_links_without_following_them():
    world, a, _ = two_hosts()
    world.server.mkdir("/shared/blobs")
    world.server.write_bytes("/shared/blobs/h", b"blob")
    world.server.symlink("blobs/h", "/shared/file")

    def program():
        os.symlink("file", "/shared/second")
        return _read("/shared/file"), _read("/shared/second")

    assert run_alone(world, a, program) == ("blob", "blob")
    assert (world.server.islink("/shared/second"), world.server.readlink("/shared/second"),
            world.server.islink("/shared/blobs/h")) == (True, "file", False)
    assert world.server.stat("/shared/file").size == len("blobs/h")


def test_a_hosts_belief_about_a_path_through_a_link_is_unknown_never_wrong():
    # Host.belief walks cached dentries as stat would but does not follow
    # links; where a cached link stands on the path it says "unknown".
    world, a, _ = two_hosts()

    def program():
        os.makedirs("/shared/real")
        _write("/shared/real/f", "x")
        os.symlink("real", "/shared/link")
        os.symlink("missing", "/shared/dangling")
        return _read("/shared/link/f"), os.path.lexists("/shared/dangling")

    assert run_alone(world, a, program) == ("x", True)
    through, final = a.belief("/shared/link/f"), a.belief("/shared/dangling")
    assert (through.believes, final.believes) == ("unknown", "unknown")
    assert "/shared/link is a symbolic link" in through.because
    assert "/shared/dangling is a symbolic link" in final.because


def test_a_target_with_a_trailing_slash_must_be_a_directory():
    # path_resolution(7): a trailing slash names a directory; a link to
    # "file/" is ENOTDIR, a link to "dir/" lists the directory.
    world, a, _ = two_hosts()

    def program():
        os.makedirs("/shared/dir")
        _write("/shared/dir/f", "x")
        os.symlink("dir/f/", "/shared/to_file")
        os.symlink("dir/", "/shared/to_dir")
        return errno_of(_read, "/shared/to_file"), os.listdir("/shared/to_dir")

    assert run_alone(world, a, program) == (errno.ENOTDIR, ["f"])
