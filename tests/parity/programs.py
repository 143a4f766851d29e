"""Plain programs for the parity tests: each takes the host's mount point first.

They never import simfs: on the real backend they run as OS processes on a
real NFS mount.  Every test directory is unique per call (a real export
outlives test runs), made by ``fresh``.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path


def fresh(root: str, name: str) -> str:
    """A clean test directory under the export."""
    path = Path(root) / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return name


def create_at(root: str, relative: str, at: float, make_parent: bool = False) -> float:
    start = time.monotonic()
    time.sleep(at)
    path = Path(root) / relative
    if make_parent:
        path.parent.mkdir()
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.close(fd)
    return time.monotonic() - start


def poll(root: str, relative: str, revalidate: tuple[str, ...] = (), limit: float = 20.0,
         every: float = 0.1) -> float:
    """Seconds from the first poll until ``relative`` is seen, opening dirs first."""
    path = Path(root) / relative
    start = time.monotonic()
    while time.monotonic() - start < limit:
        for directory in revalidate:
            try:
                os.close(os.open(Path(root) / directory, os.O_RDONLY | os.O_DIRECTORY))
            except FileNotFoundError:
                pass
        if path.exists():
            return time.monotonic() - start
        time.sleep(every)
    return float("inf")


def getattr_times(root: str, relative: str, duration: float, count: Callable[[], int],
                  every: float = 0.25) -> list[float]:
    """Times (from the start) of the stats that sent a GETATTR, polling every 0.25 s."""
    path = Path(root) / relative
    start = time.monotonic()
    seen: list[float] = []
    before = count()
    while time.monotonic() - start < duration:
        path.stat()
        after = count()
        if after > before:
            seen.append(round(time.monotonic() - start, 2))
        before = after
        time.sleep(every)
    return seen


def unlink_while_open(root: str, relative: str) -> tuple[list[str], bytes, list[str]]:
    directory = Path(root) / relative
    (directory / "f").write_bytes(b"weights")
    with open(directory / "f", "rb") as handle:
        os.unlink(directory / "f")
        during = sorted(os.listdir(directory))
        data = handle.read()
    time.sleep(0.2)  # the async removal after the last close takes a few ms
    return during, data, sorted(os.listdir(directory))


def unlink_other_name_while_open(root: str, relative: str
                                 ) -> tuple[list[str], list[str], bytes, list[str]]:
    """Open f, unlink its second name g, then f itself; read; close."""
    directory = Path(root) / relative
    (directory / "f").write_bytes(b"weights")
    os.link(directory / "f", directory / "g")
    with open(directory / "f", "rb") as handle:
        os.unlink(directory / "g")
        other = sorted(os.listdir(directory))
        os.unlink(directory / "f")
        own = sorted(os.listdir(directory))
        data = handle.read()
    time.sleep(0.2)  # the async removal after the last close takes a few ms
    return other, own, data, sorted(os.listdir(directory))


def replace_while_open(root: str, relative: str) -> tuple[list[str], bytes, list[str]]:
    directory = Path(root) / relative
    (directory / "metadata.json").write_bytes(b"v1")
    with open(directory / "metadata.json", "rb") as handle:
        (directory / "tmp").write_bytes(b"v2")
        os.replace(directory / "tmp", directory / "metadata.json")
        during = sorted(os.listdir(directory))
        data = handle.read()
    time.sleep(0.2)
    return during, data, sorted(os.listdir(directory))


def hold_unlinked(root: str, relative: str, seconds: float) -> str:
    """Open a file, unlink it (a .nfs file appears), hold it, then read it."""
    directory = Path(root) / relative
    (directory / "f").write_bytes(b"held")
    handle = open(directory / "f", "rb")
    os.unlink(directory / "f")
    time.sleep(seconds)
    try:
        handle.read()
        outcome = "read"
    except OSError as error:
        outcome = errno.errorcode[error.errno or 0]
    handle.close()
    return outcome


def _rmdir_then_rmtree(directory: Path) -> tuple[str, str]:
    """What os.rmdir, then shutil.rmtree, of ``directory`` end with: removed or an errno."""
    outcomes = []
    for remove in (os.rmdir, shutil.rmtree):
        try:
            remove(directory)
            outcomes.append("removed")
        except OSError as error:
            outcomes.append(errno.errorcode[error.errno or 0])
    return outcomes[0], outcomes[1]


def remove_beside_busy(root: str, relative: str, after: float) -> tuple[str, str]:
    """rmdir, then rmtree, of a directory holding a busy .nfs file."""
    time.sleep(after)
    return _rmdir_then_rmtree(Path(root) / relative)


def remove_own_busy(root: str, relative: str) -> tuple[str, str, list[str]]:
    """The same, from the host that holds the file open."""
    directory = Path(root) / relative
    (directory / "f").write_bytes(b"held")
    with open(directory / "f", "rb"):
        os.unlink(directory / "f")
        rmdir, rmtree = _rmdir_then_rmtree(directory)
        left = sorted(os.listdir(directory))
    return rmdir, rmtree, left


def read_after_remote_replace(root: str, relative: str, wait: float) -> str:
    path = Path(root) / relative / "metadata.json"
    path.write_bytes(b"old")
    handle = open(path, "rb")
    time.sleep(wait)
    try:
        os.fstat(handle.fileno())
        handle.read()
        outcome = "read"
    except OSError as error:
        outcome = errno.errorcode[error.errno or 0]
    handle.close()
    return outcome


def replace_file(root: str, relative: str, at: float) -> None:
    time.sleep(at)
    directory = Path(root) / relative
    (directory / "new").write_bytes(b"new")
    os.replace(directory / "new", directory / "metadata.json")


# -- byte-range writes (docs/nfs-facts.md, "Writes and data visibility") ----------


def write_file(root: str, relative: str, data: bytes) -> None:
    """Create or replace ``relative`` with ``data``, making its parents (a setup step)."""
    path = Path(root) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def read_file(root: str, relative: str) -> bytes:
    """The file as a fresh open sees it (close-to-open: the server's copy)."""
    return (Path(root) / relative).read_bytes()


def pwrite_and_close(root: str, relative: str, data: bytes, offset: int, start_at: float,
                     close_at: float) -> None:
    """O_WRONLY (no read-modify-write), one pwrite at ``start_at``, close at ``close_at``."""
    start = time.monotonic()
    time.sleep(start_at)
    fd = os.open(Path(root) / relative, os.O_WRONLY)
    os.pwrite(fd, data, offset)
    time.sleep(max(0.0, close_at - (time.monotonic() - start)))
    os.close(fd)


def write_own_page_then_patch(root: str, relative: str, reopen_at: float, patch_at: float,
                              close_at: float) -> None:
    """Create a one-page file here (so this host holds the page up to date),
    reopen it, overwrite its first 10 bytes later, and close."""
    start = time.monotonic()
    path = Path(root) / relative
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, bytes(4096))
    os.close(fd)
    time.sleep(reopen_at)
    fd = os.open(path, os.O_WRONLY)
    time.sleep(max(0.0, patch_at - (time.monotonic() - start)))
    os.pwrite(fd, b"A" * 10, 0)
    time.sleep(max(0.0, close_at - (time.monotonic() - start)))
    os.close(fd)


def write_and_hold(root: str, relative: str, hold: float) -> None:
    fd = os.open(Path(root) / relative, os.O_WRONLY)
    os.pwrite(fd, b"unflushed", 0)
    time.sleep(hold)
    os.close(fd)


def first_sighting(root: str, relative: str, expect: bytes, limit: float,
                   every: float = 0.25) -> float:
    """Seconds until a fresh open reads ``expect`` (inf if never within ``limit``)."""
    path = Path(root) / relative
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if path.read_bytes().startswith(expect):
            return time.monotonic() - start
        time.sleep(every)
    return float("inf")


def append_records(root: str, relative: str, tag: str, count: int, pause: float) -> None:
    """``count`` 64-byte records with O_APPEND, one write each."""
    fd = os.open(Path(root) / relative, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for index in range(count):
        os.write(fd, f"{tag}{index:05d}".encode().ljust(63, b".") + b"\n")
        time.sleep(pause)
    os.close(fd)


# -- stale handles (docs/nfs-facts.md, "Stale handles") ---------------------------


def _errno_of(call: Callable[[], object]) -> str:
    try:
        call()
    except OSError as error:
        return errno.errorcode[error.errno or 0]
    return "ok"


def fstat_read_close_unlinked(root: str, relative: str, wait: float) -> tuple[str, str, str]:
    """Open (unbuffered), unlink (a .nfs file appears), wait, then fstat, read, close."""
    path = Path(root) / relative / "f"
    path.write_bytes(b"held")
    fd = os.open(path, os.O_RDONLY)
    os.unlink(path)
    time.sleep(wait)
    return (_errno_of(lambda: os.fstat(fd)), _errno_of(lambda: os.read(fd, 10)),
            _errno_of(lambda: os.close(fd)))


def list_rmdir_rmtree(root: str, relative: str, after: float) -> tuple[list[str], str, str]:
    time.sleep(after)
    directory = Path(root) / relative
    listed = sorted(os.listdir(directory))
    rmdir, rmtree = _rmdir_then_rmtree(directory)
    return listed, rmdir, rmtree


def remove_tree_at(root: str, relative: str, at: float, recreate: bool = False) -> None:
    time.sleep(at)
    directory = Path(root) / relative
    shutil.rmtree(directory)
    if recreate:
        directory.mkdir()
        (directory / "new").write_bytes(b"new")


def cwd_after_removal(root: str, relative: str, wait: float) -> dict[str, object]:
    """chdir into ``relative``, wait while another host removes it, then use it."""
    os.chdir(Path(root) / relative)
    time.sleep(wait)

    def create() -> None:
        with open("f", "w"):
            pass

    return {"listdir": _errno_of(lambda: os.listdir(".")), "open": _errno_of(create),
            "stat": _errno_of(lambda: os.stat(".")),
            "getcwd": os.getcwd() == str(Path(root) / relative),
            "exists": os.path.exists("f"), "chdir": _errno_of(lambda: os.chdir(".."))}


def cwd_after_recreation(root: str, relative: str, wait: float) -> tuple[str, str, str,
                                                                           list[str]]:
    """The same, when the other host made the directory again in between."""
    os.chdir(Path(root) / relative)
    time.sleep(wait)

    def create() -> None:
        with open("g", "w"):
            pass

    stat = _errno_of(lambda: os.stat("."))
    listing = _errno_of(lambda: os.listdir("."))
    opened = _errno_of(create)
    os.chdir(Path(root) / relative)
    return stat, listing, opened, sorted(os.listdir("."))


def mkdirs_at(root: str, steps: tuple[tuple[float, str], ...]) -> None:
    """``mkdir`` each relative path at its time (seconds from the start)."""
    start = time.monotonic()
    for at, relative in steps:
        time.sleep(max(0.0, at - (time.monotonic() - start)))
        (Path(root) / relative).mkdir()


def exists_at(root: str, looks: tuple[tuple[float, str], ...]) -> list[bool]:
    """``os.path.exists`` of each relative path at its time."""
    start = time.monotonic()
    seen = []
    for at, relative in looks:
        time.sleep(max(0.0, at - (time.monotonic() - start)))
        seen.append(os.path.exists(Path(root) / relative))
    return seen


# -- locks ----------------------------------------------------------------------------


def unlink_second_link(root: str, relative: str) -> tuple[int, int]:
    """Make a hard link to a file, unlink it; the file's st_nlink before and after."""
    path = Path(root) / relative
    link = path.with_name(path.name + ".link")
    os.link(path, link)
    before = os.stat(path).st_nlink
    os.unlink(link)
    return before, os.stat(path).st_nlink


def hold_flock(root: str, relative: str, seconds: float) -> float:
    """Take an exclusive flock, hold it, release it; the wall time of the release."""
    fd = os.open(Path(root) / relative, os.O_RDWR | os.O_CREAT, 0o644)
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    time.sleep(seconds)
    released = time.time()
    os.close(fd)
    return released


def wait_flock(root: str, relative: str, after: float) -> tuple[float, float]:
    """Block on the flock another host holds; the wall times it blocked and was granted."""
    import fcntl

    time.sleep(after)
    fd = os.open(Path(root) / relative, os.O_RDWR)
    blocked = time.time()
    fcntl.flock(fd, fcntl.LOCK_EX)
    granted = time.time()
    os.close(fd)
    return blocked, granted


def read_then_patch(root: str, relative: str, patch_at: float, close_at: float) -> None:
    """O_RDWR: read the first page, then overwrite its first 10 bytes; close late."""
    start = time.monotonic()
    fd = os.open(Path(root) / relative, os.O_RDWR)
    os.pread(fd, 10, 0)
    time.sleep(max(0.0, patch_at - (time.monotonic() - start)))
    os.pwrite(fd, b"A" * 10, 0)
    time.sleep(max(0.0, close_at - (time.monotonic() - start)))
    os.close(fd)


# -- the rest of os: ownership, space, vectored I/O, lockf, fchdir ------------------------


def chown_modes(root: str, relative: str) -> list[object]:
    """chmod then chown (root, no_root_squash): the modes and owners that result."""
    answers: list[object] = []
    for name, mode in (("suid", 0o6755), ("lockish", 0o2644)):
        path = Path(root) / relative / name
        path.touch()
        os.chmod(path, mode)
        os.chown(path, 5, 6)
        result = os.stat(path)
        answers.append((oct(result.st_mode & 0o7777), result.st_uid, result.st_gid))
    return answers


def _mount_options(root: str) -> dict[str, str]:
    """The options /proc/mounts shows for the mount at ``root``."""
    with open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if fields[1] == root:
                return dict(option.partition("=")[::2] for option in fields[3].split(","))
    raise LookupError(f"{root} is not a mount point")


def statvfs_shape(root: str, relative: str) -> dict[str, object]:
    """What an NFS statvfs fixes, whatever the server's disk: sizes, flags, names."""
    result = os.statvfs(Path(root) / relative)
    file = Path(root) / relative / "f"
    file.touch()
    wsize = int(_mount_options(root)["wsize"])
    return {"bsize_is_wsize": result.f_bsize == result.f_frsize == wsize,
            "bsize_is_st_blksize": result.f_bsize == os.stat(file).st_blksize,
            "namemax": result.f_namemax, "flag": result.f_flag, "fsid": result.f_fsid,
            "ordered": result.f_bavail <= result.f_bfree <= result.f_blocks,
            "favail": result.f_favail == result.f_ffree}


def vectored(root: str, relative: str) -> list[object]:
    """writev and pwritev, then readv and preadv, of one file."""
    path = Path(root) / relative
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        written = [os.writev(fd, [b"ab", b"cd"]), os.pwritev(fd, [b"XY"], 1)]
        os.lseek(fd, 0, os.SEEK_SET)
        first, second = bytearray(3), bytearray(3)
        got = os.readv(fd, [first, second])
        small = bytearray(2)
        return [written, got, bytes(first), bytes(second[:1]), os.preadv(fd, [small], 2),
                bytes(small)]
    finally:
        os.close(fd)


def copy_range(root: str, relative: str) -> list[object]:
    """copy_file_range within the mount, by position and by offsets; its failures."""
    source = Path(root) / relative / "src"
    source.write_bytes(b"0123456789")
    src = os.open(source, os.O_RDONLY)
    dst = os.open(Path(root) / relative / "dst", os.O_RDWR | os.O_CREAT, 0o644)
    appending = os.open(Path(root) / relative / "dst", os.O_WRONLY | os.O_APPEND)
    try:
        copied = [os.copy_file_range(src, dst, 4), os.copy_file_range(src, dst, 3, 7, 8)]
        positions = [os.lseek(src, 0, os.SEEK_CUR), os.lseek(dst, 0, os.SEEK_CUR)]
        failure = _errno_of(lambda: os.copy_file_range(src, appending, 1))
        return [copied, positions, os.pread(dst, 20, 0), failure]
    finally:
        for fd in (src, dst, appending):
            os.close(fd)


def lockf_hold(root: str, relative: str, seconds: float) -> None:
    """os.lockf(F_TLOCK) the whole file, hold it, F_ULOCK it, close later."""
    fd = os.open(Path(root) / relative, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.lockf(fd, os.F_TLOCK, 0)
        time.sleep(seconds)
        os.lockf(fd, os.F_ULOCK, 0)
        time.sleep(seconds)
    finally:
        os.close(fd)


def lockf_probe(root: str, relative: str, at: float, again: float) -> list[str]:
    """F_TEST and F_TLOCK while the other host holds the lock, then after it let go."""
    time.sleep(at)
    fd = os.open(Path(root) / relative, os.O_RDWR)
    try:
        held = [_errno_of(lambda: os.lockf(fd, os.F_TEST, 0)),
                _errno_of(lambda: os.lockf(fd, os.F_TLOCK, 0))]
        time.sleep(again)
        return [*held, _errno_of(lambda: os.lockf(fd, os.F_TEST, 0)),
                _errno_of(lambda: os.lockf(fd, os.F_TLOCK, 0))]
    finally:
        os.close(fd)


def fchdir_into(root: str, relative: str) -> list[object]:
    """fchdir into an open directory; where getcwd says we are, and a relative read."""
    directory = Path(root) / relative
    (directory / "f").write_text("x")
    fd = os.open(directory, os.O_RDONLY)
    before = os.getcwd()
    try:
        os.fchdir(fd)
        with open("f") as file:
            return [os.getcwd() == os.path.realpath(directory), file.read()]
    finally:
        os.chdir(before)
        os.close(fd)


def memory_devices(root: str) -> list[object]:
    """What /dev/null, zero and urandom read as and are (major, minor); a write swallowed."""
    import stat

    with open(os.devnull, "w") as null:
        written = null.write("x" * 10)
    with open(os.devnull, "rb") as null, open("/dev/zero", "rb") as zero, \
            open("/dev/urandom", "rb") as urandom:
        answers: list[object] = [written, null.read(), zero.read(3), len(urandom.read(8))]
    for device in ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"):
        result = os.stat(device)
        answers.append((stat.S_ISCHR(result.st_mode), oct(stat.S_IMODE(result.st_mode)),
                        os.major(result.st_rdev), os.minor(result.st_rdev)))
    return answers


def name_lengths(root: str, relative: str) -> dict[str, str]:
    """What names of 255 and 256 bytes, and paths of 4095 and 4096 bytes, meet."""
    directory = os.path.join(root, relative)

    def create(name: str) -> None:
        os.close(os.open(os.path.join(directory, name), os.O_CREAT | os.O_WRONLY, 0o644))

    def padded(length: int) -> str:  # "<directory>/missing/x/x/.../y", ``length`` bytes
        return _exact(os.path.join(directory, "missing") + "/", length)

    return {
        "create 255": _errno_of(lambda: create("a" * 255)),
        "create 256": _errno_of(lambda: create("a" * 256)),
        "stat 256": _errno_of(lambda: os.stat(os.path.join(directory, "b" * 256))),
        "mkdir 256": _errno_of(lambda: os.mkdir(os.path.join(directory, "c" * 256))),
        "create 255 bytes of 2-byte chars": _errno_of(lambda: create("é" * 127 + "x")),
        "create 256 bytes of 2-byte chars": _errno_of(lambda: create("é" * 128)),
        "rename to 256": _errno_of(lambda: os.rename(os.path.join(directory, "a" * 255),
                                                     os.path.join(directory, "d" * 256))),
        "256 under a missing directory": _errno_of(
            lambda: os.stat(os.path.join(directory, "missing", "e" * 256))),
        "path of 4095 bytes": _errno_of(lambda: os.stat(padded(4095))),
        "path of 4096 bytes": _errno_of(lambda: os.stat(padded(4096))),
    }


def _exact(head: str, length: int) -> str:
    """``head`` followed by short components to exactly ``length`` bytes."""
    rest = length - len(head.encode())
    path = head + "x/" * (rest // 2)
    return path + "y" if rest % 2 else path[:-1] + "y"


def edge_errnos(root: str, relative: str) -> dict[str, object]:
    """How the kernel answers the awkward cases of renames, removals and slashes."""
    d = os.path.join(root, relative)
    for sub in ("dir", "dir/sub", "full", "full/inner", "empty"):
        os.mkdir(os.path.join(d, sub))
    for name in ("file", "other"):
        with open(os.path.join(d, name), "w") as handle:
            handle.write("data")
    p = lambda *names: os.path.join(d, *names)  # noqa: E731

    def appended() -> str:
        fd = os.open(p("log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, b"abc")
        os.pwrite(fd, b"X", 0)  # pwrite(2) BUGS: Linux appends with O_APPEND
        os.close(fd)
        with open(p("log"), "rb") as handle:
            return handle.read().decode()

    return {
        "rename file over dir": _errno_of(lambda: os.rename(p("file"), p("empty"))),
        "rename dir over file": _errno_of(lambda: os.rename(p("dir"), p("other"))),
        "rename dir over non-empty dir": _errno_of(lambda: os.rename(p("dir"), p("full"))),
        "rename dir into itself": _errno_of(lambda: os.rename(p("dir"), p("dir", "sub", "x"))),
        "rename to itself": _errno_of(lambda: os.rename(p("file"), p("file"))),
        "rmdir a file": _errno_of(lambda: os.rmdir(p("file"))),
        "rmdir dot": _errno_of(lambda: os.rmdir(p("empty", "."))),
        "stat file slash": _errno_of(lambda: os.stat(p("file") + "/")),
        "open file slash": _errno_of(lambda: open(p("file") + "/").close()),
        "create slash": _errno_of(lambda: open(p("new") + "/", "w").close()),
        "mkdir slash": _errno_of(lambda: os.mkdir(p("made") + "/")),
        "readlink a file": _errno_of(lambda: os.readlink(p("file"))),
        "symlink over existing": _errno_of(lambda: os.symlink("x", p("file"))),
        "link a directory": _errno_of(lambda: os.link(p("dir"), p("dirlink"))),
        "unlink a directory": _errno_of(lambda: os.unlink(p("dir"))),
        "unlink file slash": _errno_of(lambda: os.unlink(p("file") + "/")),
        "rename file to slash": _errno_of(lambda: os.rename(p("file"), p("renamed") + "/")),
        "symlink to new slash": _errno_of(lambda: os.symlink("x", p("newlink") + "/")),
        "rename dir slash to slash": _errno_of(lambda: os.rename(p("empty") + "/",
                                                                 p("moved") + "/")),
        "rmdir slash": _errno_of(lambda: os.rmdir(p("moved") + "/")),
        "stat dir dot": _errno_of(lambda: os.stat(p("dir", "."))),
        "rmdir dotdot then dot": _errno_of(lambda: os.rmdir(p("dir", "..", "full", "inner",
                                                                "."))),
        "unlink dotdot then slash": _errno_of(lambda: os.unlink(p("dir", "..", "other") + "/")),
        "create dotdot then slash": _errno_of(
            lambda: os.close(os.open(p("dir", "..", "fresh") + "/", os.O_CREAT | os.O_WRONLY))),
        "create file dot": _errno_of(
            lambda: os.close(os.open(p("other", "."), os.O_CREAT | os.O_WRONLY))),
        "create missing dot": _errno_of(
            lambda: os.close(os.open(p("nope", "."), os.O_CREAT | os.O_WRONLY))),
        "pwrite negative": _errno_of(lambda: os.pwrite(os.open(p("other"), os.O_WRONLY), b"Z",
                                                       -1)),
        "symlink target of 1025": _errno_of(lambda: os.symlink("y" * 1025, p("longlink"))),
        "symlink target of 4096": _errno_of(lambda: os.symlink("y" * 4096, p("longerlink"))),
        "listdir bytes": str(os.listdir(os.fsencode(p("full")))),
        "pwrite with O_APPEND": appended(),
    }


def block_counts(root: str, relative: str) -> dict[str, int]:
    """st_blocks (512-byte units) of files written, holes left, links and a directory."""
    d = Path(root) / relative
    for name, size in (("empty", 0), ("one", 1), ("page", 4096), ("page1", 4097)):
        (d / name).write_bytes(b"x" * size)
    with open(d / "sparse", "wb") as file:
        file.truncate(1 << 20)
    with open(d / "island", "wb") as file:
        file.truncate(1 << 20)
        file.seek(512 << 10)
        file.write(b"x")
    os.symlink("short", d / "short")
    os.symlink("x" * 80, d / "long")
    (d / "sub").mkdir()
    return {name: os.lstat(d / name).st_blocks for name in (
        "empty", "one", "page", "page1", "sparse", "island", "short", "long", "sub")}


def atime_reader(root: str, relative: str, at: float, again: float) -> None:
    """Read the file (a READ), then read it again from the page cache later."""
    time.sleep(at)
    for pause in (0.0, again):
        time.sleep(pause)
        with open(Path(root) / relative, "rb") as file:
            file.read()


def atime_seen(root: str, relative: str, at: float) -> float:
    """atime - mtime of the file, in seconds, as this host stats it at ``at``."""
    time.sleep(at)
    result = os.stat(Path(root) / relative)
    return (result.st_atime_ns - result.st_mtime_ns) / 1e9


def directory_atime_moved(root: str, relative: str) -> bool:
    """Whether listing the directory moved its atime, as another host's stat sees."""
    before = os.stat(Path(root) / relative).st_atime_ns
    time.sleep(1)
    os.listdir(Path(root) / relative)
    time.sleep(4)  # past acdirmin=3: the next stat asks the server
    return os.stat(Path(root) / relative).st_atime_ns > before


# -- held-out differences (docs/nfs-facts.md, "Held-out cases") -------------------


def _until(start: float, at: float) -> None:
    time.sleep(max(0.0, at - (time.monotonic() - start)))


def rewrite_at(root: str, relative: str, at: float, data: bytes, offset: int = 0) -> None:
    """At ``at``: open O_WRONLY (no truncation), pwrite ``data`` at ``offset``, close."""
    time.sleep(at)
    fd = os.open(Path(root) / relative, os.O_WRONLY)
    os.pwrite(fd, data, offset)
    os.close(fd)


def pread_held_open(root: str, relative: str, looks: tuple[float, ...], size: int = 16
                    ) -> list[object]:
    """Open once, then pread ``size`` bytes at 0 at each time: the bytes or an errno."""
    start = time.monotonic()
    fd = os.open(Path(root) / relative, os.O_RDONLY)
    seen: list[object] = []
    for at in looks:
        _until(start, at)
        try:
            seen.append(os.pread(fd, size, 0))
        except OSError as error:
            seen.append(errno.errorcode[error.errno or 0])
    os.close(fd)
    return seen


def own_write_after_remote_change(root: str, relative: str, write_at: float,
                                  reopen_at: float, late_at: float) -> list[bytes]:
    """Read page 0 through an O_RDWR descriptor; at ``write_at`` write one byte in
    page 1, fsync, pread page 0 again, close; read page 0 through fresh opens at
    ``reopen_at`` and ``late_at``."""
    start = time.monotonic()
    path = Path(root) / relative
    fd = os.open(path, os.O_RDWR)
    seen = [os.pread(fd, 4, 0)]
    _until(start, write_at)
    os.pwrite(fd, b"X", 5000)
    os.fsync(fd)
    seen.append(os.pread(fd, 4, 0))
    os.close(fd)
    for at in (reopen_at, late_at):
        _until(start, at)
        with open(path, "rb") as handle:
            seen.append(handle.read(4))
    return seen


def exists_after_stale_pread(root: str, relative: str, at: float) -> dict[str, object]:
    """Open and read f; at ``at`` pread again (ESTALE once f is gone), then look f up."""
    start = time.monotonic()
    path = Path(root) / relative / "f"
    fd = os.open(path, os.O_RDONLY)
    os.pread(fd, 4, 0)
    _until(start, at)
    answers: dict[str, object] = {"pread": _errno_of(lambda: os.pread(fd, 4, 0))}
    answers["exists"] = os.path.exists(path)
    answers["stat"] = _errno_of(lambda: os.stat(path))
    answers["exists again"] = os.path.exists(path)

    def read() -> None:
        answers["read"] = path.read_bytes()

    answers["open"] = _errno_of(read)
    answers["fstat"] = _errno_of(lambda: os.fstat(fd))
    os.close(fd)
    return answers


def remove_at(root: str, relative: str, at: float, recreate: bytes = b"") -> None:
    """At ``at``: unlink ``relative``; make it again holding ``recreate`` if given."""
    time.sleep(at)
    path = Path(root) / relative
    path.unlink()
    if recreate:
        path.write_bytes(recreate)


def rename_at(root: str, relative: str, target: str, at: float) -> None:
    time.sleep(at)
    os.rename(Path(root) / relative, Path(root) / target)


def exists_after_reading(root: str, relative: str, looks: tuple[float, ...],
                         keep_open: bool = False) -> list[bool]:
    """Read ``relative`` (closing it unless ``keep_open``), then exists() at each time."""
    start = time.monotonic()
    path = Path(root) / relative
    handle = open(path, "rb")
    handle.read()
    if not keep_open:
        handle.close()
    seen = []
    for at in looks:
        _until(start, at)
        seen.append(os.path.exists(path))
    handle.close()
    return seen


def dir_fd_after_removal(root: str, relative: str, at: float, cached: bool,
                         ops: tuple[str, ...]) -> dict[str, object]:
    """Open ``relative`` O_DIRECTORY (holding x); at ``at`` run ``ops`` through it."""
    start = time.monotonic()
    fd = os.open(Path(root) / relative, os.O_RDONLY | os.O_DIRECTORY)
    if cached:
        os.stat("x", dir_fd=fd)
    _until(start, at)
    calls: dict[str, Callable[[], object]] = {
        "fstat": lambda: os.fstat(fd),
        "listdir": lambda: os.listdir(fd),
        "stat x": lambda: os.stat("x", dir_fd=fd),
        "open x": lambda: os.close(os.open("x", os.O_RDONLY, dir_fd=fd)),
        "open new": lambda: os.close(os.open("n", os.O_WRONLY | os.O_CREAT, 0o644,
                                             dir_fd=fd)),
        "open excl": lambda: os.close(os.open("e", os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                                              0o644, dir_fd=fd)),
        "mkdir": lambda: os.mkdir("z", dir_fd=fd),
        "unlink x": lambda: os.unlink("x", dir_fd=fd),
        "rmdir sub": lambda: os.rmdir("sub", dir_fd=fd),
        "rename x": lambda: os.rename("x", "y", src_dir_fd=fd, dst_dir_fd=fd),
    }
    answers: dict[str, object] = {}
    for op in ops:
        answers[op if op not in answers else op + " again"] = _errno_of(calls[op])
    os.close(fd)
    return answers


def remove_tree_and_maybe_recreate(root: str, relative: str, at: float,
                                   recreate: bool) -> None:
    time.sleep(at)
    directory = Path(root) / relative
    shutil.rmtree(directory)
    if recreate:
        directory.mkdir()
        (directory / "x").write_bytes(b"again")


def pread_rw_then_reopen(root: str, relative: str, looks: tuple[float, ...], close_at: float,
                         reopen_looks: tuple[float, ...]) -> list[object]:
    """pread through an O_RDWR descriptor at ``looks``, close it at ``close_at``,
    then read through a fresh O_RDONLY open at each of ``reopen_looks``."""
    start = time.monotonic()
    path = Path(root) / relative
    fd = os.open(path, os.O_RDWR)
    seen: list[object] = []
    for at in looks:
        _until(start, at)
        seen.append(os.pread(fd, 16, 0))
    _until(start, close_at)
    os.close(fd)
    for at in reopen_looks:
        _until(start, at)
        with open(path, "rb") as handle:
            seen.append(handle.read(16))
    return seen


# -- lock modes (nolock, local_lock=) -------------------------------------------------


def _exclusive(fd: int, call: str, blocking: bool) -> None:
    """An exclusive whole-file lock by ``flock`` or ``lockf`` (fcntl's F_SETLK)."""
    import fcntl

    flags = fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB)
    (fcntl.flock if call == "flock" else fcntl.lockf)(fd, flags)


def hold_locks(root: str, relative: str, plan: list[tuple[str, str]], seconds: float) -> None:
    """Lock each (file, "flock" or "lockf") of the plan, hold them all, close them."""
    fds = []
    try:
        for name, call in plan:
            fd = os.open(Path(root) / relative / name, os.O_RDWR | os.O_CREAT, 0o644)
            fds.append(fd)
            _exclusive(fd, call, blocking=True)
        time.sleep(seconds)
    finally:
        for fd in fds:
            os.close(fd)


def try_locks(root: str, relative: str, plan: list[tuple[str, str]], at: float) -> list[str]:
    """At ``at`` s, try each (file, call) once without blocking: "granted" or "refused"."""
    time.sleep(at)
    answers = []
    for name, call in plan:
        fd = os.open(Path(root) / relative / name, os.O_RDWR)
        try:
            _exclusive(fd, call, blocking=False)
            answers.append("granted")
        except OSError as error:
            # F_SETLK and LOCK_NB refuse with EAGAIN (EACCES is POSIX's other word).
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            answers.append("refused")
        finally:
            os.close(fd)
    return answers


# -- NFSv4.1 read delegations ---------------------------------------------------------


def read_and_hold(root: str, relative: str, at: float, seconds: float) -> None:
    """At ``at`` s open the file read-only and read it, hold it ``seconds``, close."""
    time.sleep(at)
    fd = os.open(Path(root) / relative, os.O_RDONLY)
    try:
        os.read(fd, 100)
        time.sleep(seconds)
    finally:
        os.close(fd)


def timed_write_opens(root: str, relative: str, names: list[str], at: float,
                      delays: Callable[[], int]) -> list[tuple[float, int]]:
    """From ``at`` s, open each file for write and close it, 0.5 s apart: the
    seconds each open took and the NFS4ERR_DELAY retries it counted."""
    time.sleep(at)
    answers = []
    for name in names:
        before = delays()
        started = time.monotonic()
        os.close(os.open(Path(root) / relative / name, os.O_WRONLY))
        answers.append((time.monotonic() - started, delays() - before))
        time.sleep(0.5)
    return answers
