"""Ownership: chown, lchown and fchown inside the world.

The simulated processes run as root, and the export is ``no_root_squash``
(as compose/ and the VM runner export it), so root may give any file to
any uid and gid (chown(2)), a symbolic link's own owner included (lchown).
Each call is one SETATTR; ``-1`` (or ``(uid_t)-1``) leaves an id as it is,
and with both left as they are ``nfs_setattr`` sends nothing
(fs/nfs/inode.c: no attribute in NFS_VALID_ATTRS to set).  tarfile, run as
root, gives every extracted file its archived owner this way.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import tarfile
import tempfile
import time
from collections.abc import Callable

import pytest

from simfs import World

FILE = "/shared/owned"


def _run(program: Callable[[], object], mount: str = "vers=3") -> tuple[object, World]:
    world = World(seed=1)
    process = world.spawn(world.host("a", mount=mount), program)
    world.run()
    return process.result(), world


def _owner(path: str, follow: bool = True) -> tuple[int, int]:
    result = os.stat(path, follow_symlinks=follow)
    return result.st_uid, result.st_gid


def test_a_chown_is_a_setattr_that_another_host_sees():
    def owner_then_wait() -> None:
        with open(FILE, "w"):
            pass
        os.chown(FILE, 1000, 1001)

    def other_host() -> tuple[int, int]:
        time.sleep(1)
        with open(FILE):  # close-to-open: a GETATTR
            return _owner(FILE)

    world = World(seed=1)
    owner = world.spawn(world.host("a"), owner_then_wait)
    reader = world.spawn(world.host("b"), other_host)
    world.run()
    assert owner.result() is None and reader.result() == (1000, 1001)
    (event,) = world.trace.select(op="chown")
    assert (event.host, event.path, event.outcome, event.rpcs) == ("a", FILE, "ok", ("SETATTR",))


def test_minus_one_keeps_an_id_and_with_both_kept_no_rpc_is_sent():
    def program() -> list[object]:
        with open(FILE, "w"):
            pass
        os.chown(FILE, -1, 5)
        first = _owner(FILE)
        os.chown(FILE, (1 << 32) - 1, 6)  # (uid_t)-1 is -1 too
        second = _owner(FILE)
        ctime = os.stat(FILE).st_ctime_ns
        time.sleep(1)
        os.chown(FILE, -1, -1)
        return [first, second, os.stat(FILE).st_ctime_ns == ctime]

    result, world = _run(program)
    assert result == [(0, 5), (0, 6), True]
    rpcs = [event.rpcs for event in world.trace.select(op="chown")]
    assert rpcs == [("SETATTR",), ("SETATTR",), ()]


def test_lchown_gives_the_link_itself_and_fchown_the_open_file():
    def program() -> list[object]:
        with open(FILE, "w"):
            pass
        os.symlink(FILE, "/shared/link")
        os.lchown("/shared/link", 7, 8)
        answers: list[object] = [_owner("/shared/link", follow=False), _owner(FILE)]
        os.chown("/shared/link", 3, 4)  # follows the link
        answers += [_owner("/shared/link", follow=False), _owner(FILE)]
        fd = os.open(FILE, os.O_RDONLY)
        os.fchown(fd, 9, 10)
        answers.append((os.fstat(fd).st_uid, os.fstat(fd).st_gid))
        os.close(fd)
        return answers

    assert _run(program)[0] == [(7, 8), (0, 0), (7, 8), (3, 4), (9, 10)]


BAD_IDS = [("a", 0), (1.0, 0), (-2, 0), (1 << 32, 0), ((1 << 63) - 1, 0), (1 << 63, 0),
           (1 << 64, 0), (-(1 << 64), 0), (0, -2), (0, "x")]


def _error_of(call: Callable[[], object]) -> str:
    try:
        call()
    except (TypeError, OverflowError) as error:
        return repr(error)
    return "no error"


@pytest.mark.parametrize("ids", BAD_IDS)
def test_an_id_out_of_range_is_refused_as_the_real_chown_refuses_it(ids):
    # CPython converts the ids (_Py_Uid_Converter) before any syscall, so the
    # real call on a real temporary file raises without touching it.
    with tempfile.NamedTemporaryFile() as real:
        expected = _error_of(lambda: os.chown(real.name, *ids))

    def program() -> str:
        with open(FILE, "w"):
            pass
        return _error_of(lambda: os.chown(FILE, *ids))

    assert _run(program)[0] == expected != "no error"


def test_a_read_only_mount_refuses_a_chown_even_of_nothing():
    # do_fchownat takes write access to the mount before anything else.
    def program() -> list[int]:
        errors = []
        for ids in ((1, 1), (-1, -1)):
            try:
                os.chown("/shared", *ids)
            except OSError as error:
                errors.append(error.errno)
        return errors

    assert _run(program, mount="vers=3,ro")[0] == [errno.EROFS, errno.EROFS]


def test_tarfile_run_as_root_extracts_another_users_files_with_their_owner():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = b"weights" * 100
        member = tarfile.TarInfo("model/weights.bin")
        member.size, member.uid, member.gid, member.uname = len(data), 1000, 1000, "trainer"
        archive.addfile(member, io.BytesIO(data))
    archived = buffer.getvalue()

    def program() -> list[object]:
        with open("/shared/model.tar", "wb") as file:
            file.write(archived)
        with tarfile.open("/shared/model.tar") as archive:
            # "tar" keeps the archived owners ("data" would drop them).
            archive.extractall("/shared/out", filter="tar")
        with open("/shared/out/model/weights.bin", "rb") as file:
            content = file.read()
        return [_owner("/shared/out/model/weights.bin"), content == data]

    # "trainer" is no user here (pwd holds root alone), so tarfile falls back
    # to the archived numeric ids, as on a machine without that user.
    assert _run(program)[0] == [(1000, 1000), True]


def test_a_chown_takes_set_user_id_and_group_executable_set_group_id_off_a_file():
    # chown(2): "When the owner or group of an executable file is changed by
    # an unprivileged user, the S_ISUID and S_ISGID mode bits are cleared ...
    # since Linux 2.2.13, root is treated like other users"; S_ISGID without
    # group-execute (mandatory locking) stays.  A directory keeps both.
    def program() -> list[str]:
        os.mkdir("/shared/dir")
        for path, mode in ((FILE, 0o6755), ("/shared/lockish", 0o2644), ("/shared/dir", 0o6755)):
            if path != "/shared/dir":
                with open(path, "w"):
                    pass
            os.chmod(path, mode)
            os.chown(path, 5, 5)
        return [oct(stat.S_IMODE(os.stat(path).st_mode))
                for path in (FILE, "/shared/lockish", "/shared/dir")]

    assert _run(program)[0] == ["0o755", "0o2644", "0o6755"]
