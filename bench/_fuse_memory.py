"""An in-memory filesystem served over FUSE by Python (mfusepy over libfuse3).

    python bench/_fuse_memory.py MOUNTPOINT

The stand-in for "the world answers each FUSE request": every request is a
Python call on a dict, as a simulated NFS client's answer would be.  The
kernel's caches are off (``entry_timeout``/``attr_timeout`` 0, ``direct_io``),
so every open, stat, read and write reaches this process.  Used by
``bench_processes.py``; serves until the mount is unmounted.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from typing import Any

import mfusepy as fuse


class Memory(fuse.Operations):
    use_ns = True

    def __init__(self) -> None:
        now = time.time_ns()
        self.files: dict[str, dict[str, Any]] = {
            "/": {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2, "st_ctime": now,
                  "st_mtime": now, "st_atime": now}}
        self.data: dict[str, bytearray] = {}
        self.fd = 0

    def _get(self, path: str) -> dict[str, Any]:
        try:
            return self.files[path]
        except KeyError:
            raise fuse.FuseOSError(errno.ENOENT) from None

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        attrs = dict(self._get(path))
        if path in self.data:
            attrs["st_size"] = len(self.data[path])
        return attrs

    def readdir(self, path: str, fh: Any) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return [".", ".."] + [name[len(prefix):] for name in self.files
                              if name.startswith(prefix) and "/" not in name[len(prefix):]
                              and name != prefix]

    def mkdir(self, path: str, mode: int) -> int:
        now = time.time_ns()
        self.files[path] = {"st_mode": stat.S_IFDIR | mode, "st_nlink": 2, "st_ctime": now,
                            "st_mtime": now, "st_atime": now}
        return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        now = time.time_ns()
        self.files[path] = {"st_mode": stat.S_IFREG | mode, "st_nlink": 1, "st_ctime": now,
                            "st_mtime": now, "st_atime": now}
        self.data[path] = bytearray()
        self.fd += 1
        return self.fd

    def open(self, path: str, flags: int) -> int:
        self._get(path)
        if flags & os.O_TRUNC:
            self.data[path] = bytearray()
        self.fd += 1
        return self.fd

    def read(self, path: str, size: int, offset: int, fh: Any) -> bytes:
        return bytes(self.data[path][offset:offset + size])

    def write(self, path: str, data: bytes, offset: int, fh: Any) -> int:
        buffer = self.data[path]
        if len(buffer) < offset:
            buffer.extend(b"\0" * (offset - len(buffer)))
        buffer[offset:offset + len(data)] = data
        return len(data)

    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        buffer = self.data[path]
        del buffer[length:]
        buffer.extend(b"\0" * (length - len(buffer)))
        return 0

    def unlink(self, path: str) -> int:
        self._get(path)
        del self.files[path]
        self.data.pop(path, None)
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        self.files[new] = self.files.pop(old)
        if old in self.data:
            self.data[new] = self.data.pop(old)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        return 0

    def utimens(self, path: str, times: Any = None) -> int:
        return 0

    def flush(self, path: str, fh: Any) -> int:
        return 0

    def release(self, path: str, fh: Any) -> int:
        return 0

    def fsync(self, path: str, datasync: int, fh: Any) -> int:
        return 0


def serve(mountpoint: str, threads: bool = False) -> None:
    fuse.FUSE(Memory(), mountpoint, foreground=True, nothreads=not threads, direct_io=True,
              entry_timeout=0, attr_timeout=0, negative_timeout=0)


if __name__ == "__main__":
    serve(sys.argv[1])
