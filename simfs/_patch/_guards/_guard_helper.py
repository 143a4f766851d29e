"""The native guard's supervisor, a separate process: it answers without the GIL.

Run by ``_native_guard`` as ``python -I -S _guard_helper.py CONTROL REPORT
PAGE`` (descriptor numbers).  It holds the seccomp listeners (each filtered
thread sends its own over CONTROL, a Unix socket, as ``L`` with the
descriptor attached) and judges every syscall the filters report, so native
code that holds the test interpreter's GIL (torch's C++ writer, a
``ctypes.PyDLL`` call) still gets its answer: a supervisor thread in that
interpreter waited for the GIL forever.

What it knows comes from the control pipe, written by the test process
before the calls it concerns (so draining the pipe before judging a call is
enough): ``M <export>`` a simulated mount's path; ``+ <tid>`` / ``- <tid>`` a
simulated process's OS thread starts or ends; ``T <tid> <path>...`` (or
``T <tid> *``) a real access simfs itself announced on that thread (see
``_native_guard._announce``); ``E <tid> <slot>`` an engine thread of the
greenlet baton, which runs every process of a world: slot ``<slot>`` of the
shared PAGE holds the key of the process it runs (8 bytes, 0 while it runs
the world's own code, whose calls are not judged).  Paths are hex-encoded
bytes.

The rule, per reported call of a simulated process's thread: a path under a
simulated mount (reads and stats included) is refused; a call that changes
the filesystem elsewhere is refused unless announced; anything else goes on.
A refusal answers ``EACCES`` and is written to the report pipe (``<key>
<syscall> <path>...``, hex; the key is the thread id of a thread-baton
process, the slot's key on an engine thread) *before* the answer, so the caller cannot run on
before the test process can see it.  It imports only the standard library
and ``_seccomp.py`` (by path), so it starts in tens of milliseconds.
"""

from __future__ import annotations

import ctypes
import errno
import importlib.util
import mmap
import os
import select
import socket
import struct
import sys
from collections import deque
from types import ModuleType
from typing import Any


def _load_seccomp() -> ModuleType:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_seccomp.py")
    spec = importlib.util.spec_from_file_location("_simfs_seccomp", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_AT_FDCWD = -100


class Helper:
    def __init__(self, seccomp: ModuleType, control: int, report: int, page: int) -> None:
        self.seccomp = seccomp
        self.page = mmap.mmap(page, 0, prot=mmap.PROT_READ)
        self.engines: dict[int, int] = {}  # engine thread id -> its slot in the page
        self.listeners: set[int] = set()
        self.arrived: deque[int] = deque()  # descriptors received, not yet named by an L
        self.poller = select.poll()
        self.channel = socket.socket(fileno=control)
        self.channel.setblocking(False)
        self.control = control
        self.report = report
        self.libc: Any = ctypes.CDLL(None, use_errno=True)
        self.mounts: set[bytes] = set()
        self.processes: set[int] = set()
        self.tokens: dict[int, frozenset[bytes] | None] = {}
        self.pending = b""
        self.closed = False
        machine = os.uname().machine
        _, self.names = seccomp.filter_program(machine)
        self.reading = {seccomp.SYSCALLS[name][0 if machine == "x86_64" else 1]
                        for name in seccomp.READING} - {None}

    def drain(self) -> None:
        """Apply every control message written so far."""
        while True:
            try:
                chunk, fds, _flags, _address = socket.recv_fds(self.channel, 65536, 64)
            except BlockingIOError:
                break
            self.arrived.extend(fds)
            if not chunk:
                self.closed = True
                break
            self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            kind, _, rest = line.partition(b" ")
            if kind == b"M":
                self.mounts.add(bytes.fromhex(rest.decode()))
            elif kind == b"+":
                self.processes.add(int(rest))
            elif kind == b"-":
                tid = int(rest)
                self.processes.discard(tid)
                self.engines.pop(tid, None)
                self.tokens.pop(tid, None)
            elif kind == b"L":
                listener = self.arrived.popleft()
                self.listeners.add(listener)
                self.poller.register(listener, select.POLLIN)
            elif kind == b"E":
                tid_text, _, slot = rest.partition(b" ")
                self.engines[int(tid_text)] = int(slot)
            elif kind == b"T":
                tid_text, _, paths = rest.partition(b" ")
                self.tokens[int(tid_text)] = None if paths == b"*" else frozenset(
                    bytes.fromhex(path.decode()) for path in paths.split())

    def under_mount(self, path: bytes) -> bool:
        return any(path == mount or path.startswith(mount + b"/") for mount in self.mounts)

    def resolve(self, tid: int, path: bytes, dirfd: int | None) -> bytes:
        """An absolute, normalized path (no symlinks followed), as the caller meant it."""
        if not path.startswith(b"/"):
            base = "cwd" if dirfd is None or dirfd == _AT_FDCWD else f"fd/{dirfd}"
            try:
                path = os.readlink(f"/proc/{tid}/{base}").encode() + b"/" + path
            except OSError:
                return path
        return os.path.normpath(path)

    def judge(self, notif: Any, listener: int) -> str | None:
        """None to let the call go on; else the call as the refusal names it."""
        tid = notif.pid
        if tid in self.processes:
            key = tid
        elif tid in self.engines:
            # Written by the engine thread itself before it switched to the
            # process now blocked in this call: it cannot change meanwhile.
            key = struct.unpack_from("Q", self.page, self.engines[tid] * 8)[0]
            if key == 0:
                return None  # the world's own code
        else:
            return None
        name = self.names.get(notif.nr, str(notif.nr))
        _, _, path_args = self.seccomp.SYSCALLS.get(name, (0, None, ()))
        memory = os.open(f"/proc/{tid}/mem", os.O_RDONLY)
        try:
            raw = [(self.seccomp.read_string(memory, notif.args[index]), index)
                   for index in path_args]
            writes = True
            if name == "openat2":
                how = os.pread(memory, 8, notif.args[2])
                writes = bool(int.from_bytes(how, sys.byteorder) & self.seccomp.WRITE_FLAGS)
        finally:
            os.close(memory)
        if self.libc.ioctl(listener, self.seccomp.IOCTL_ID_VALID,
                           ctypes.byref(ctypes.c_uint64(notif.id))):
            return None  # the thread is gone: what was read may be another's memory
        at_form = name.endswith(("at", "at2")) or name == "statx"
        paths = []
        for path, index in raw:
            if not path:
                paths.append(path)  # a descriptor's call (utimensat(fd, NULL)): no path
                continue
            # The *at forms take the directory descriptor just before the path.
            dirfd = ctypes.c_int32(notif.args[index - 1]).value if at_form and index else None
            paths.append(self.resolve(tid, path, dirfd))
        if any(self.under_mount(path) for path in paths):
            return self.refuse(key, name, paths, "mount")
        if name in self.seccomp.FLAGS_ARG:
            flags = notif.args[self.seccomp.FLAGS_ARG[name]]
            writes = bool(flags & self.seccomp.WRITE_FLAGS)
        elif notif.nr in self.reading:
            writes = False
        if not writes:
            return None
        token = self.tokens.pop(tid, frozenset())
        raw_paths = {path for path, _ in raw}
        if token is None or raw_paths & token or set(paths) & token:
            return None
        return self.refuse(key, name, paths, "write")

    def refuse(self, key: int, name: str, paths: list[bytes], why: str) -> str:
        record = " ".join([str(key), name, why, *(path.hex() or "-" for path in paths)])
        os.write(self.report, record.encode() + b"\n")
        return name

    def serve(self) -> None:
        seccomp = self.seccomp
        notif = seccomp.Notif()
        resp = seccomp.Resp()
        self.poller.register(self.control, select.POLLIN)
        while not self.closed:
            ready = self.poller.poll()
            self.drain()
            for fd, events in ready:
                if fd == self.control or fd not in self.listeners:
                    continue
                if events & select.POLLIN:
                    self.answer(fd, notif, resp)
                elif events & (select.POLLHUP | select.POLLERR):
                    # Every thread of that filter has ended.
                    self.poller.unregister(fd)
                    self.listeners.discard(fd)
                    os.close(fd)

    def answer(self, listener: int, notif: Any, resp: Any) -> None:
        seccomp = self.seccomp
        ctypes.memset(ctypes.byref(notif), 0, ctypes.sizeof(notif))
        if self.libc.ioctl(listener, seccomp.IOCTL_RECV, ctypes.byref(notif)) != 0:
            return  # EINTR, or ENOENT: the thread went away meanwhile
        self.drain()
        resp.id = notif.id
        resp.val = 0
        resp.error = 0
        resp.flags = seccomp.FLAG_CONTINUE
        try:
            refused = self.judge(notif, listener)
        except Exception as error:  # never leave a thread hanging in its syscall
            key = notif.pid
            if key in self.engines:
                key = struct.unpack_from("Q", self.page, self.engines[key] * 8)[0]
            refused = self.refuse(key, self.names.get(notif.nr, str(notif.nr)),
                                  [repr(error).encode()], "unreadable")
        if refused is not None:
            resp.error = -errno.EACCES
            resp.flags = 0
        # ENOENT: the thread was killed meanwhile; nothing waits for the answer.
        self.libc.ioctl(listener, seccomp.IOCTL_SEND, ctypes.byref(resp))


def main() -> None:
    control, report, page = (int(argument) for argument in sys.argv[1:4])
    Helper(_load_seccomp(), control, report, page).serve()


if __name__ == "__main__":
    main()
