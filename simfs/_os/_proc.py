"""What a simulated host answers for the real-machine paths around its NFS mount.

Coordination libraries look outside the export before they lock inside it:
``os.makedirs("/shared", exist_ok=True)`` and ``os.path.ismount`` stat ``/``;
filelock 4 stats ``/proc/self/ns/pid`` to notice a fork and reads
``/proc/self/stat`` for a process start token; others read
``/proc/self/mountinfo`` or ``/proc/mounts`` to learn that a path is on NFS.
On a real host those answers belong to the host, so each simulated host
answers them itself, from the world: ``/`` and the export's parents are
directories of a local root filesystem (so the export is a mount point),
and a small read-only ``/proc`` describes the calling process and the
host's NFS mount with its nfs(5) options, written as the kernel shows them
(``nfs_show_mount_options`` in fs/nfs/super.c: defaults are not shown).

The memory devices (/dev/null, zero, random, urandom) are answered by
``_devices``.  Only the entries listed here exist; any other ``/proc`` path is ENOENT, as
on a kernel without that feature (callers that read ``/proc`` treat a
missing entry as "unknown").  Everything else outside the export is still
refused by the syscall layer.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import posixpath
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import simulated_oserror
from .._nfs._mount import (
    DEFAULT_ACDIRMAX,
    DEFAULT_ACDIRMIN,
    DEFAULT_ACREGMAX,
    DEFAULT_ACREGMIN,
)
from .._nfs._server import EXPORT_DEV
from . import _devices

if TYPE_CHECKING:
    from .._engine._scheduler import Process
    from .._nfs._mount import MountOptions

ROOT_DEV = os.makedev(8, 1)  # the host's local root filesystem (sda1)
PROC_DEV = os.makedev(0, 22)
NSFS_DEV = os.makedev(0, 4)
# PROC_PID_INIT_INO in include/linux/proc_ns.h: every host is its own machine,
# so each process is in its host's initial pid namespace.
PID_NAMESPACE_INO = 0xEFFFFFFC
_CLOCK_TICKS = 100  # USER_HZ, the unit of /proc/<pid>/stat's starttime
_NOT_OURS = object()


def _stat(mode: int, dev: int, ino: int, size: int = 0, nlink: int = 1) -> os.stat_result:
    return os.stat_result((mode, ino, dev, nlink, 0, 0, size, 0, 0, 0))


def _is_outside(process: Process, text: str) -> bool:
    syscalls = process.syscalls
    return (text.startswith("/") and text != syscalls.export
            and not text.startswith(syscalls.export_prefix))


def _text(path: object) -> str | None:
    """The path as text, or None for a descriptor or something that is no path."""
    if isinstance(path, int):
        return None
    # os.fspath itself tells a path from anything else: a test against the
    # os.PathLike ABC costs more than the call, on every poll of a Path.
    try:
        text = os.fspath(path)  # type: ignore[call-overload]
    except TypeError:
        return None
    return os.fsdecode(text) if isinstance(text, bytes) else text


def outside_export(process: Process, path: object) -> str | None:
    """``path`` normalised if it names something outside the export, else None."""
    text = path if path.__class__ is str else _text(path)  # a str: one call fewer per poll
    if not isinstance(text, str) or not text.startswith("/"):
        return None  # a descriptor, or relative: the syscall layer resolves it
    if text.startswith(process.syscalls.export_prefix) and "/.." not in text:
        # The common case: inside the export, and no ".." can climb out of it
        # (normalising "." and "//" keeps a path under the same prefix).
        return None
    if "/." in text or "//" in text:
        text = posixpath.normpath(text)
    return text if _is_outside(process, text) else None


def _ancestors(process: Process) -> list[str]:
    export = process.syscalls.export
    parents = []
    while export != "/":
        export = posixpath.dirname(export)
        parents.append(export)
    return parents


# -- /proc contents ------------------------------------------------------------------


def _mount_flags(options: MountOptions) -> list[str]:
    """The generic flags of the mount, as ``show_mnt_opts`` (fs/proc_namespace.c)
    lists them after ro/rw; ``noac`` sets SB_SYNCHRONOUS, so it shows ``sync``
    (measured: docs/nfs-facts.md, "Mount lines")."""
    kept = set(options.kept)
    parts: list[str] = [flag for flag in ("nosuid", "nodev", "noexec") if flag in kept]
    if "noatime" in kept:
        parts.append("noatime")
    if "nodiratime" in kept:
        parts.append("nodiratime")
    if not kept & {"noatime", "strictatime", "norelatime"}:
        parts.append("relatime")
    return parts


def _super_flags(options: MountOptions) -> list[str]:
    """ro/rw and the superblock's flags (``show_sb_opts``)."""
    parts = ["ro" if options.readonly else "rw"]
    if options.sync or options.noac:
        parts.append("sync")
    parts += [flag for flag in ("dirsync", "lazytime") if flag in options.kept]
    return parts


def _nfs_options(options: MountOptions) -> str:
    """The NFS options as ``nfs_show_mount_options`` (fs/nfs/super.c) prints
    them: defaults left out, the options a mount line gave kept as given
    (addresses, ports, ``sec``), else a plausible server's."""
    kept = {item.partition("=")[0]: item for item in options.kept}
    parts = [f"vers={options.vers}", f"rsize={options.rsize}", f"wsize={options.wsize}",
             "namlen=255"]
    for name, value, default in (("acregmin", options.acregmin, DEFAULT_ACREGMIN),
                                 ("acregmax", options.acregmax, DEFAULT_ACREGMAX),
                                 ("acdirmin", options.acdirmin, DEFAULT_ACDIRMIN),
                                 ("acdirmax", options.acdirmax, DEFAULT_ACDIRMAX)):
        if value != default:
            parts.append(f"{name}={value}")
    parts.append("hard" if options.hard else "soft")
    for flag, shown in (("nocto", not options.cto), ("noac", options.noac),
                        ("nolock", not options.lock), ("noacl", "noacl" in kept),
                        ("nosharecache", not options.sharecache),
                        ("noresvport", "noresvport" in kept)):
        if shown:
            parts.append(flag)
    parts.append(kept.get("proto", "proto=tcp"))
    if options.nconnect > 1:
        parts.append(f"nconnect={options.nconnect}")
    if "port" in kept:
        parts.append(kept["port"])
    parts += [f"timeo={options.timeo}", f"retrans={options.retrans}",
              kept.get("sec", "sec=sys")]
    if options.vers == "3":  # NFSv3 mounts through the MOUNT protocol; v4 has a callback
        parts += [kept.get("mountaddr", "mountaddr=10.0.0.1"),
                  kept.get("mountvers", "mountvers=3"), kept.get("mountport", "mountport=20048"),
                  kept.get("mountproto", "mountproto=udp")]
    else:  # measured over v4.1: ...,sec=sys,clientaddr=...,local_lock=none,addr=...
        parts.append(kept.get("clientaddr", "clientaddr=10.0.0.2"))
    if "fsc" in kept:
        parts.append("fsc")
    if options.lookupcache != "all":
        parts.append("lookupcache=" + ("pos" if options.lookupcache == "positive"
                                       else options.lookupcache))
    parts += [f"local_lock={options.local_lock}", kept.get("addr", "addr=10.0.0.1")]
    return ",".join(parts)


def _v4(process: Process) -> bool:
    return process.syscalls.mount_options.vers != "3"


def _fs_type(process: Process) -> str:
    """/proc/mounts names an NFSv4 mount's type nfs4 (measured on 6.1)."""
    return "nfs4" if _v4(process) else "nfs"


def _mount_options(process: Process) -> str:
    """The host's mount as the kernel lists it in /proc/mounts."""
    options = process.syscalls.mount_options
    return ",".join([*_super_flags(options), *_mount_flags(options), _nfs_options(options)])


def _local_lines(process: Process) -> list[tuple[str, str, str, str, str]]:
    """(source, point, type, options, major:minor) of each of the host's local disks."""
    lines = []
    for index, disk in enumerate(process.syscalls.local_disks):
        dev = f"{os.major(disk.dev)}:{os.minor(disk.dev)}"
        if disk.kind == "tmpfs":  # shmem_show_options: the size in KiB
            lines.append(("tmpfs", disk.point, "tmpfs",
                          f"rw,nosuid,nodev,size={disk.size // 1024}k", dev))
        else:
            lines.append((f"/dev/sd{chr(ord('a') + index)}", disk.point, "ext4",
                          "rw,relatime", dev))
    return lines


def _mounts(process: Process) -> str:
    export = process.syscalls.export
    local = "".join(f"{source} {point} {kind} {options} 0 0\n"
                    for source, point, kind, options, _ in _local_lines(process))
    return (f"/dev/sda1 / ext4 rw,relatime 0 0\n"
            f"proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
            f"nfs-server:{export} {export} {_fs_type(process)} "
            f"{_mount_options(process)} 0 0\n{local}")


def _mountinfo(process: Process) -> str:
    export = process.syscalls.export
    options = process.syscalls.mount_options
    mount = ",".join(["ro" if options.readonly else "rw", *_mount_flags(options)])
    sb = ",".join([*_super_flags(options), _nfs_options(options)])
    nfs = f"{os.major(EXPORT_DEV)}:{os.minor(EXPORT_DEV)}"
    local = "".join(f"{41 + index} 21 {dev} / {point} {options} shared:{31 + index} - {kind} "
                    f"{source} rw\n"
                    for index, (source, point, kind, options, dev)
                    in enumerate(_local_lines(process)))
    return (f"21 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
            f"22 21 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:2 - proc proc rw\n"
            f"40 21 {nfs} / {export} {mount} shared:30 - {_fs_type(process)} nfs-server:{export} "
            f"{sb}\n{local}")


def _pid_of(process: Process, part: str) -> int | None:
    """The pid a /proc directory name stands for, on this host, or None."""
    if part in ("self", "thread-self"):
        return int(process.group.pid)
    if not part.isdigit():
        return None
    pid = int(part)
    alive = any(p.group.pid == pid and not p.done for p in process.syscalls.host_processes)
    return pid if alive else None


def _comm(process: Process, pid: int) -> str:
    for candidate in process.syscalls.host_processes:
        if candidate.group.pid == pid and candidate.parent is None:
            return str(candidate.name)[:15]
    return "python3"


def _pid_stat(process: Process, pid: int) -> str:
    # Field 22, starttime: simulated pids are never reused within a world, so a
    # value fixed by the pid identifies the process as the kernel's does.
    fields = [str(pid), f"({_comm(process, pid)})", "S", "1", str(pid), str(pid), "0", "-1",
              "4194560"] + ["0"] * 8 + ["20", "0", "1", "0", str(_CLOCK_TICKS + pid)]
    fields += ["0"] * (52 - len(fields))
    return " ".join(fields) + "\n"


def _pid_status(process: Process, pid: int) -> str:
    return (f"Name:\t{_comm(process, pid)}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{pid}\n"
            f"Ngid:\t0\nPid:\t{pid}\nPPid:\t1\nTracerPid:\t0\nUid:\t0\t0\t0\t0\n"
            f"Gid:\t0\t0\t0\t0\nNSpid:\t{pid}\nNSpgid:\t{pid}\nNSsid:\t{pid}\n")


def _boot_id(process: Process) -> str:
    seeded = f"{process.syscalls.seed}:{process.host.name}".encode()
    digest = hashlib.blake2b(seeded, digest_size=16).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:]}\n"


_PID_FILES: dict[str, Callable[[Process, int], str]] = {
    "stat": _pid_stat, "status": _pid_status,
    "mountinfo": lambda process, pid: _mountinfo(process),
    "mounts": lambda process, pid: _mounts(process),
}
_FILES: dict[str, Callable[[Process], str]] = {
    "/proc/mounts": _mounts,
    "/proc/sys/kernel/overflowuid": lambda process: "65534\n",
    "/proc/sys/kernel/random/boot_id": _boot_id,
}


# What a host's /sys answers: its cgroup v2 CPU limit, which libraries read to
# size their worker pools (pandas 3's read_csv, compat/_cpu.py, reads
# cpu.max at its first parallel read; issue 30).  ``max 100000`` is no quota
# (the kernel's cpu_max_show, kernel/sched/core.c: "max" and the period in
# µs), so the host's CPUs (os.cpu_count, os.sched_getaffinity) are the limit.
# Any other /sys path is the real machine's and stays refused.
_SYS: dict[str, tuple[str, Any]] = {
    "/sys": ("dir", None), "/sys/fs": ("dir", None), "/sys/fs/cgroup": ("dir", None),
    "/sys/fs/cgroup/cpu.max": ("file", "max 100000\n"),
}


def _proc_entry(process: Process, text: str) -> tuple[str, Any]:
    """("file", content) | ("dir", None) | ("link", target) | ("ns", None) for /proc paths.

    Raises:
        FileNotFoundError: an entry this /proc does not have.
    """
    if text == "/proc":
        return "dir", None
    if text in _FILES:
        return "file", _FILES[text](process)
    if text == "/proc/sys" or text.startswith("/proc/sys/"):
        raise simulated_oserror(errno.ENOENT, text)
    parts = text.split("/")[2:]
    pid = _pid_of(process, parts[0])
    if pid is None:
        raise simulated_oserror(errno.ENOENT, text)
    rest = parts[1:]
    if not rest:
        if parts[0] == "self":
            return "link", str(pid)
        if parts[0] == "thread-self":
            return "link", f"{pid}/task/{pid}"
        return "dir", None
    if rest == ["ns"]:
        return "dir", None
    if rest == ["ns", "pid"]:
        return "ns", None
    if len(rest) == 1 and rest[0] in _PID_FILES:
        return "file", _PID_FILES[rest[0]](process, pid)
    raise simulated_oserror(errno.ENOENT, text)


# -- the calls -----------------------------------------------------------------------


def answer(process: Process, op: str, text: str) -> object:
    """The host's answer to ``op`` on ``text`` (outside the export), or a marker for none.

    Args:
        process: the calling simulated process (its host and pid decide the answer).
        op: ``stat``, ``lstat``, ``access``, ``readlink``, ``mkdir`` or ``open``.
        text: an absolute, normalised path outside the export.

    Raises:
        OSError: what the host answers (ENOENT for a missing /proc entry,
            EEXIST for mkdir of a parent of the export or of a /proc entry).
    """
    if text in _ancestors(process):
        return _parent_answer(op, text)
    if text in _devices.DEVICES or text == "/dev":
        return _device_answer(op, text)
    if text in _SYS:
        kind, content = _SYS[text]
    elif text != "/proc" and not text.startswith("/proc/"):
        return _NOT_OURS
    else:
        kind, content = _proc_entry(process, text)
    if op in ("stat", "lstat"):
        if kind == "dir" or (kind == "link" and op == "stat"):
            return _stat(stat.S_IFDIR | 0o555, PROC_DEV, 1 + len(text), nlink=2)
        if kind == "link":
            return _stat(stat.S_IFLNK | 0o777, PROC_DEV, 1 + len(text))
        if kind == "ns":
            return _stat(stat.S_IFREG | 0o444, NSFS_DEV, PID_NAMESPACE_INO)
        return _stat(stat.S_IFREG | 0o444, PROC_DEV, 1 + len(text))
    if op == "access":
        return True
    if op == "readlink":
        if kind == "ns":
            return f"pid:[{PID_NAMESPACE_INO}]"
        if kind != "link":
            raise simulated_oserror(errno.EINVAL, text)
        return content
    if op == "open" and kind == "file":
        return content
    if op == "mkdir":
        raise simulated_oserror(errno.EEXIST if kind != "file" else errno.ENOENT, text)
    return _NOT_OURS  # listing or changing /proc: refused by the syscall layer


def _device_answer(op: str, text: str) -> object:
    if op in ("stat", "lstat"):
        return _devices.stat_of(text)
    if op == "access":
        return True
    if op == "mkdir":
        raise simulated_oserror(errno.EEXIST, text)
    if op == "readlink":
        raise simulated_oserror(errno.EINVAL, text)
    if op == "open" and text != "/dev":
        return _devices.Device(text)
    return _NOT_OURS  # listing /dev, or os.open of a device: refused


def _parent_answer(op: str, text: str) -> object:
    if op in ("stat", "lstat"):
        return _stat(stat.S_IFDIR | 0o755, ROOT_DEV, 2 if text == "/" else 2 + len(text),
                     nlink=3)
    if op == "access":
        return True
    if op == "mkdir":
        raise simulated_oserror(errno.EEXIST, text)
    if op == "readlink":
        raise simulated_oserror(errno.EINVAL, text)
    return _NOT_OURS  # listing or opening the local root is not simulated: refused


def is_answered(value: object) -> bool:
    """Whether ``answer`` answered (False: the syscall layer refuses the path)."""
    return value is not _NOT_OURS


def open_file(content: str, mode: str, encoding: str | None, errors: str | None,
              newline: str | None) -> Any:
    """A read-only file object over a /proc entry's text, as ``open()`` returns one."""
    if set(mode) & set("wax+"):
        raise simulated_oserror(errno.EACCES)
    raw = io.BytesIO(content.encode())
    if "b" in mode:
        return io.BufferedReader(raw)
    return io.TextIOWrapper(io.BufferedReader(raw),
                            encoding or "utf-8", errors, newline)
