"""The kernel side of the native guard: a seccomp user-notification filter.

Constants, structures and the BPF program for ``_native_guard``, all through
``ctypes`` (no compiler, no new dependency).  Sources: seccomp(2),
seccomp_unotify(2), include/uapi/linux/seccomp.h, filter.h, audit.h,
prctl.h; syscall numbers from arch/x86/entry/syscalls/syscall_64.tbl and
include/uapi/asm-generic/unistd.h (aarch64).
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Any

# -- kernel constants (include/uapi/linux/seccomp.h, filter.h, audit.h, prctl.h) --
PR_SET_NO_NEW_PRIVS = 38
PR_GET_SECCOMP = 21
PR_SET_PTRACER = 0x59616D61
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
# A tripwire, not a sandbox: do not make the kernel add speculation barriers
# (SSBD, IBPB on switch) to the filtered threads, which switch at every baton pass.
SECCOMP_FILTER_FLAG_SPEC_ALLOW = 1 << 2
RET_ALLOW = 0x7FFF0000
RET_USER_NOTIF = 0x7FC00000
FLAG_CONTINUE = 1
# _IOWR('!', 0, struct seccomp_notif[80]), _IOWR('!', 1, struct seccomp_notif_resp[24]),
# _IOW('!', 2, __u64): the generic ioctl encoding, the same on x86_64 and aarch64.
IOCTL_RECV = 0xC0502100
IOCTL_SEND = 0xC0182101
IOCTL_ID_VALID = 0x40082102
# BPF opcodes: ld|w|abs, jmp|jeq|k, jmp|jset|k, ret|k.
_LD_ABS, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

# name -> (x86_64 number, aarch64 number or None, path argument indexes).
# aarch64 has only the *at forms (asm-generic/unistd.h).
SYSCALLS: dict[str, tuple[int, int | None, tuple[int, ...]]] = {
    "open": (2, None, (0,)), "openat": (257, 56, (1,)), "openat2": (437, 437, (1,)),
    "creat": (85, None, (0,)), "mkdir": (83, None, (0,)), "mkdirat": (258, 34, (1,)),
    "mknod": (133, None, (0,)), "mknodat": (259, 33, (1,)),
    "unlink": (87, None, (0,)), "unlinkat": (263, 35, (1,)), "rmdir": (84, None, (0,)),
    "rename": (82, None, (0, 1)), "renameat": (264, 38, (1, 3)),
    "renameat2": (316, 276, (1, 3)), "link": (86, None, (0, 1)),
    "linkat": (265, 37, (1, 3)), "symlink": (88, None, (0, 1)),
    "symlinkat": (266, 36, (0, 2)), "truncate": (76, 45, (0,)),
    "chmod": (90, None, (0,)), "fchmod": (91, 52, ()), "fchmodat": (268, 53, (1,)),
    "fchmodat2": (452, 452, (1,)), "chown": (92, None, (0,)), "fchown": (93, 55, ()),
    "lchown": (94, None, (0,)), "fchownat": (260, 54, (1,)),
    "utime": (132, None, (0,)), "utimes": (235, None, (0,)),
    "futimesat": (261, None, (1,)), "utimensat": (280, 88, (1,)),
    "setxattr": (188, 5, (0,)), "lsetxattr": (189, 6, (0,)),
    "removexattr": (197, 14, (0,)), "lremovexattr": (198, 15, (0,)),
    # Calls that only look: reported so that a path under a simulated mount is
    # refused (the supervisor lets them go on anywhere else).
    "stat": (4, None, (0,)), "lstat": (6, None, (0,)), "newfstatat": (262, 79, (1,)),
    "statx": (332, 291, (1,)), "access": (21, None, (0,)), "faccessat": (269, 48, (1,)),
    "faccessat2": (439, 439, (1,)), "readlink": (89, None, (0,)),
    "readlinkat": (267, 78, (1,)), "chdir": (80, 49, (0,)), "statfs": (137, 43, (0,)),
    "execve": (59, 221, (0,)), "execveat": (322, 281, (1,)),
}
READING = frozenset({"stat", "lstat", "newfstatat", "statx", "access", "faccessat",
                     "faccessat2", "readlink", "readlinkat", "chdir", "statfs", "execve",
                     "execveat"})
# open/openat's flags argument: the supervisor lets a read-only open go on
# unless its path is under a simulated mount.
FLAGS_ARG = {"open": 1, "openat": 2}
# fstat(fd) is newfstatat(fd, "", AT_EMPTY_PATH) in glibc >= 2.33: a descriptor's
# call, allowed in BPF (the flags argument of each).
AT_EMPTY_PATH = 0x1000
EMPTY_PATH_ARG = {"newfstatat": 3, "statx": 2}
# machine -> (AUDIT_ARCH_*, seccomp(2) number).
ARCHES = {"x86_64": (0xC000003E, 317), "aarch64": (0xC00000B7, 277)}
GETTID = {"x86_64": 186, "aarch64": 178}


class Notif(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("pid", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("nr", ctypes.c_int32), ("arch", ctypes.c_uint32),
                ("ip", ctypes.c_uint64), ("args", ctypes.c_uint64 * 6)]


class Resp(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("val", ctypes.c_int64), ("error", ctypes.c_int32),
                ("flags", ctypes.c_uint32)]


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Insn))]


def filter_program(machine: str) -> tuple[list[tuple[int, int, int, int]], dict[int, str]]:
    """The BPF program for ``machine`` and the names of the syscalls it reports."""
    names: dict[int, str] = {}
    arch, _ = ARCHES[machine]
    checked = []  # (number, AT_EMPTY_PATH's argument or None)
    for name, (x86, arm, _paths) in SYSCALLS.items():
        number = x86 if machine == "x86_64" else arm
        if number is not None:
            checked.append((number, EMPTY_PATH_ARG.get(name)))
            names[number] = name
    program: list[tuple[int, int, int, int]] = [
        (_LD_ABS, 0, 0, 4),                 # arch
        (_JEQ, 1, 0, arch),
        (_RET, 0, 0, RET_ALLOW),           # another ABI (x32/compat): not guarded
        (_LD_ABS, 0, 0, 0),                 # nr
    ]
    # Each syscall: jeq nr -> its block, else on to the next test.
    blocks: list[list[tuple[int, int, int, int]]] = []
    for _number, flags_arg in checked:
        if flags_arg is None:
            blocks.append([(_RET, 0, 0, RET_USER_NOTIF)])
        else:
            blocks.append([(_LD_ABS, 0, 0, 16 + 8 * flags_arg),
                           (_JSET, 1, 0, AT_EMPTY_PATH),
                           (_RET, 0, 0, RET_USER_NOTIF),
                           (_RET, 0, 0, RET_ALLOW)])
    tests = len(checked)
    offsets = []
    position = 0
    for block in blocks:
        offsets.append(position)
        position += len(block)
    for index, (number, _) in enumerate(checked):
        # From test i, the blocks start after the remaining tests and the final allow.
        jump = (tests - index - 1) + 1 + offsets[index]
        program.append((_JEQ, jump, 0, number))
    program.append((_RET, 0, 0, RET_ALLOW))
    for block in blocks:
        program.extend(block)
    return program, names


def install_filter(libc: Any, machine: str) -> tuple[int, dict[int, str], str | None]:
    """Install the filter on the calling thread only (no TSYNC).

    Returns the listener descriptor, the names of the reported syscalls by
    number, and None; or -1, {} and why it could not be installed.
    """
    program, names = filter_program(machine)
    if len(program) > 255:
        return -1, {}, "the filter would not fit BPF's jump range"
    insns = (_Insn * len(program))(*[_Insn(c, t, f, k) for c, t, f, k in program])
    prog = _Prog(len(program), insns)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return -1, {}, f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}"
    _, seccomp_nr = ARCHES[machine]
    fd = libc.syscall(seccomp_nr, SECCOMP_SET_MODE_FILTER,
                       SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_SPEC_ALLOW,
                       ctypes.byref(prog))
    if fd < 0:
        code = ctypes.get_errno()
        return -1, {}, (f"seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER) failed with "
                f"{errno.errorcode.get(code, code)}: {os.strerror(code)} (user notification "
                "needs Linux >= 5.5 and a container profile that allows seccomp)")
    return fd, names, None


def read_string(memory: int, address: int) -> bytes:
    """A NUL-terminated path from the thread's memory, read page by page."""
    if address == 0:
        return b""
    found = b""
    while len(found) < 4096:  # PATH_MAX
        size = 4096 - address % 4096  # never across a page the thread may not have
        try:
            chunk = os.pread(memory, size, address)
        except OSError:
            return found or b"?"
        end = chunk.find(b"\0")
        if end >= 0 or not chunk:
            return found + chunk[:max(end, 0)]
        found += chunk
        address += len(chunk)
    return found
